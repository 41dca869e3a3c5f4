from django.apps import AppConfig


class LabelingConfig(AppConfig):
    name = "labeling"
    verbose_name = "Labeling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from labeling import checks  # noqa: F401  (registers the checks)

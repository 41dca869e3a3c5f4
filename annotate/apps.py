from django.apps import AppConfig


class AnnotateConfig(AppConfig):
    """The project configuration as an app: only to register its system checks."""

    name = "annotate"
    verbose_name = "annotate configuration"

    def ready(self) -> None:
        from annotate import checks  # noqa: F401  (registers the checks)

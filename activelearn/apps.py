from django.apps import AppConfig


class ActivelearnConfig(AppConfig):
    name = "activelearn"
    verbose_name = "Active learning"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class ActivelearnConfig(AppConfig):
    name = "activelearn"
    verbose_name = "Active learning"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from activelearn.dashboard import checkpoint_panel, generations_panel
        from labeling.staff.panels import DashboardPanel, dashboard_panel_register

        dashboard_panel_register(DashboardPanel(name="generations", render=generations_panel))
        dashboard_panel_register(DashboardPanel(name="prm-checkpoints", render=checkpoint_panel))

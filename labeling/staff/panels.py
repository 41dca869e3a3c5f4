"""Panels that other apps add to the staff dashboard.

The dashboard draws labeling's own figures. An app built on labeling (activelearn:
PRM metrics per checkpoint) registers a panel from its ``AppConfig.ready()``, so
the dependency runs one way: that app knows the dashboard, the dashboard knows
only that panels exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.http import HttpRequest
from django.utils.safestring import SafeString


@dataclass(frozen=True)
class DashboardPanel:
    # Unique, so that registering again (a second ready() in tests) replaces the panel.
    name: str
    # One ``<figure class="panel">`` of HTML for this request (a few queries at most).
    render: Callable[[HttpRequest], SafeString]


_PANELS: dict[str, DashboardPanel] = {}


def dashboard_panel_register(panel: DashboardPanel) -> None:
    _PANELS[panel.name] = panel


def dashboard_panels() -> list[DashboardPanel]:
    """The registered panels, in the order they were first registered."""
    return list(_PANELS.values())

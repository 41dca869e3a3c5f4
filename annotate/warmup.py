"""What a web worker loads before its first request, so that its first labeler does not wait for it.

Django imports the URLconf (and with it every view and the REST API's
libraries) on the first request a process serves, and compiles a template the
first time one is rendered. In a fresh gunicorn worker that is about 150 ms of
CPU on the first request; after a deploy or a restart every worker pays it at
once, while labelers are asking for their first task.
No database or cache connection is opened here: connections belong to the
request threads that use them.
"""

from __future__ import annotations

from django.template.loader import get_template
from django.urls import get_resolver

# The pages and fragments a labeler's first minutes render.
TEMPLATES = ("base.html", "labeling/home.html", "labeling/task.html", "labeling/phase_one.html")


def warm() -> None:
    get_resolver().url_patterns  # noqa: B018  (the property imports the URLconf and its views)
    for name in TEMPLATES:
        get_template(name)

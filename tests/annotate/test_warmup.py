"""A web worker loads its views and the labeler templates when it starts, not on its first labeler's request."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from django.conf import settings

from annotate.warmup import TEMPLATES

PROBE = """
import json, sys
VIEWS = ("labeling.web.views", "labeling.web.phase_one_views", "labeling.api.views")
import annotate.wsgi
from django.db import connections
from django.template import engines

from django.template.loaders.cached import Loader as Cached

loader = engines["django"].engine.template_loaders[0]
while not isinstance(loader, Cached):  # template_partials' loader wraps the cached one
    (loader,) = loader.loaders
print(json.dumps({
    "views": [m for m in VIEWS if m in sys.modules],
    "templates": sorted(loader.get_template_cache),
    "connections": [c.alias for c in connections.all(initialized_only=True) if c.connection is not None],
}))
"""


def test_importing_the_wsgi_application_loads_the_views_and_templates_and_opens_no_connection() -> None:
    # A process of its own, as a gunicorn worker: this one has long imported everything.
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=os.environ | {"DJANGO_SETTINGS_MODULE": "annotate.settings"},
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["views"] == ["labeling.web.views", "labeling.web.phase_one_views", "labeling.api.views"]
    assert set(TEMPLATES) <= set(loaded["templates"])
    assert loaded["connections"] == []

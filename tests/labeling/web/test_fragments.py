"""The task screen's fragments are compiled once per process, not on every rating or hand-out."""

from __future__ import annotations

from django.template import engines
from django.template.loader import get_template
from django.template.loaders.cached import Loader as CachedLoader


def test_templates_are_loaded_through_the_cached_loader() -> None:
    # DEBUG off (and on, since Django 4.1): no "loaders" option, so Django
    # wraps the file loaders in the cached one; template_partials wraps that.
    outer = engines["django"].engine.template_loaders  # type: ignore[attr-defined]
    inner = [loader for wrapper in outer for loader in getattr(wrapper, "loaders", [wrapper])]
    assert any(isinstance(loader, CachedLoader) for loader in inner)


def test_the_rating_and_panel_fragments_are_compiled_once() -> None:
    for name in ("labeling/task.html#rated", "labeling/task.html#task-panel"):
        assert get_template(name).template is get_template(name).template  # type: ignore[attr-defined]

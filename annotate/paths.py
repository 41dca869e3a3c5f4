"""``int_path``: reverse() for URLs whose arguments are all integers, without walking the resolver per call.

A task panel names about a dozen URLs (each step's rating form, submit, give
up, ...), and each reverse() walks the URL resolver: together a tenth of the
panel's CPU. The URL of a name is the same string for
every set of integer arguments but for the integers themselves, so it is
reversed once, with marker values in their places, and formatted per call.
"""

from __future__ import annotations

from functools import cache

from django.urls import get_script_prefix, get_urlconf, reverse

# Values no real key reaches, each written once in the reversed URL.
_MARKER_BASE = 9000000001


@cache
def _path_format(name: str, arity: int, prefix: str, urlconf: str | None) -> str:
    # The prefix and the urlconf are part of the key because reverse() depends
    # on both (a deployment under a sub-path, a test's override).
    markers = [_MARKER_BASE + i for i in range(arity)]
    url = reverse(name, args=markers, urlconf=urlconf).replace("{", "{{").replace("}", "}}")
    for i, marker in enumerate(markers):
        if url.count(str(marker)) != 1:
            raise ValueError(f"int_path: URL {name!r} does not carry argument {i} once as written")
        url = url.replace(str(marker), f"{{{i}}}")
    return url


def int_path_format(name: str, arity: int) -> str:
    """The URL of ``name`` as a ``str.format`` pattern of its ``arity`` integer arguments ({0}, {1}, ...).

    For a caller that formats many URLs of one name in one request (a panel's
    rating forms): the script prefix and the urlconf are looked up once.
    """
    return _path_format(name, arity, get_script_prefix(), get_urlconf())


def int_path(name: str, *args: int) -> str:
    """``reverse(name, args=args)``, as it would answer, for integer ``args``."""
    values = [int(a) for a in args]
    if any(v < 0 for v in values):
        return reverse(name, args=values)  # not what the converters of these URLs accept: let reverse() say so
    return int_path_format(name, len(values)).format(*values)

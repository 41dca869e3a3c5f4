"""annotate.wsgi with a test-only pause between a rating's commit and its response.

While the file named by FAULT_SLOW_FLAG exists, a rating request (``/steps/`` in the
path) is handled in full (its transaction committed) and then held for
FAULT_SLOW_SECONDS before the response is sent: the window in which the fault test
SIGKILLs the server. Never used outside tests/faults.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from annotate.wsgi import application as _application

FLAG = Path(os.environ.get("FAULT_SLOW_FLAG", "/nonexistent"))
SECONDS = float(os.environ.get("FAULT_SLOW_SECONDS", "30"))


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    response = _application(environ, start_response)
    if "/steps/" in environ.get("PATH_INFO", "") and FLAG.exists():
        # The view has returned: the rating is committed, the client has no answer yet.
        (FLAG.parent / "committed").touch()
        time.sleep(SECONDS)
    return response

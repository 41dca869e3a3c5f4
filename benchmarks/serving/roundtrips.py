"""Round trips to PostgreSQL, counted where psycopg waits for them: for the benchmark's probe and the tests.

Every blocking call of psycopg runs one generator in ``psycopg.waiting.wait``,
which reads the answers it asked for before it returns. Each wait for an
answer (``Wait.R``; not its continuation after the wait loop's interval) is a
round trip: a statement's first execute in a transaction waits twice, for
BEGIN and for itself. A call that read an answer without waiting (it came
while psycopg was still sending) is one. A pipelined execute only sends.
Importing this changes nothing; ``counting_wait`` builds the replacement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import waiting


def counting_wait(original: Callable[..., Any], add: Callable[[int], None]) -> Callable[..., Any]:
    """``original`` (psycopg's wait function) that calls ``add`` with each call's round trips."""

    def wait(gen: Any, fileno: int, *args: Any, **kwargs: Any) -> Any:
        def counted() -> Any:
            waits = 0  # for an answer: a BEGIN and the statement after it are two in one call
            read = False  # an answer, perhaps without waiting (already there while sending)
            timed_out = False
            try:
                state = next(gen)
                while True:
                    if state == waiting.Wait.R and not timed_out:
                        waits += 1
                    ready = yield state
                    read = read or bool(ready & waiting.Ready.R)
                    timed_out = not ready  # the wait loop's interval ran out: the same wait goes on
                    state = gen.send(ready)
            except StopIteration as stop:
                add(max(waits, int(read)))
                return stop.value

        return original(counted(), fileno, *args, **kwargs)

    return wait

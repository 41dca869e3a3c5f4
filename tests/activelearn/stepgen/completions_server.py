"""A small OpenAI-compatible ``/v1/completions`` server for tests (stdlib, in a thread).

Its "model" is a list of documents: a sample continues the prompt with the rest of a
document that starts with the prompt (sample i takes the i-th such document, cycling),
so outputs depend on the request. It honours ``n``, ``stop`` and ``max_tokens`` (counted
in words) and reports ``finish_reason``/``stop_reason`` as vLLM does. ``script`` lists
what to do for the next requests (an HTTP status with a body, a delay, a raw body);
after it runs out every request is answered normally.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOST = "I do not know how to go on."


@dataclass
class Fail:
    status: int
    body: str = "server error"


@dataclass
class Sleep:
    seconds: float


@dataclass
class RawBody:
    body: str


@dataclass
class ServerState:
    documents: list[str]
    script: list[Fail | Sleep | RawBody] = field(default_factory=list)
    report_stop_reason: bool = True
    # At most this many choices per response, whatever ``n`` asks (llama.cpp's server: 1).
    max_choices: int | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def complete(state: ServerState, payload: dict[str, Any]) -> dict[str, Any]:
    prompt = payload["prompt"]
    stops = payload.get("stop") or []
    continuations = [doc[len(prompt) :] for doc in state.documents if doc.startswith(prompt)] or [LOST]
    choices = []
    wanted = payload.get("n", 1)
    for index in range(wanted if state.max_choices is None else min(wanted, state.max_choices)):
        text = continuations[index % len(continuations)]
        finish, stop_reason = "stop", None  # the document ends: end of sequence
        hits = [(text.index(stop), stop) for stop in stops if stop in text]
        if hits:
            position, stop_reason = min(hits)
            text = text[:position]
        words = text.split(" ")
        if len(words) > payload.get("max_tokens", 16):
            text, finish, stop_reason = " ".join(words[: payload["max_tokens"]]), "length", None
        choice: dict[str, Any] = {"index": index, "text": text, "finish_reason": finish, "logprobs": None}
        if state.report_stop_reason:
            choice["stop_reason"] = stop_reason
        choices.append(choice)
    return {"id": "cmpl-test", "object": "text_completion", "model": payload.get("model"), "choices": choices}


def handler_for(state: ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with state.lock:
                state.requests.append(json.loads(body))
                state.headers.append(dict(self.headers.items()))
                action = state.script.pop(0) if state.script else None
            if self.path != "/v1/completions":
                return self._send(404, json.dumps({"error": f"no route {self.path}"}))
            if isinstance(action, Sleep):
                time.sleep(action.seconds)
            if isinstance(action, Fail):
                return self._send(action.status, json.dumps({"error": action.body}))
            if isinstance(action, RawBody):
                return self._send(200, action.body)
            return self._send(200, json.dumps(complete(state, state.requests[-1])))

        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

    return Handler


@contextmanager
def completions_server(state: ServerState) -> Iterator[str]:
    """Serve on 127.0.0.1 on a free port; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

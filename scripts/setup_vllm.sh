#!/usr/bin/env bash
# Create .venv-vllm: vLLM 0.33's Python modules on a CPU build of torch, with codemask installed editable,
# for the tests of codemask.integrations (tests/integrations). Called by `bash scripts/setup.sh --with vllm`.
#
# vLLM 0.33 pins torch 2.14.0, of which the package index has only CUDA builds (gigabytes), and its wheel
# is built for CUDA. Its Python modules (configs, the structured-output manager and backends, the
# sampler's logits processors) import and run on a CPU all the same, so this environment holds:
#   - torch 2.13.0 (the CPU build),
#   - vllm==0.33.0 without its dependencies,
#   - the pure-Python packages those modules import (PURE_PYTHON below), each at the version range
#     vLLM's own metadata requires where it names one,
#   - codemask (editable) with transformers in vLLM's range (<5.21) and pytest.
# VLLM_TARGET_DEVICE=cpu must be set when vLLM's modules are imported (tests/integrations does it).
# Idempotent: a second run with nothing changed takes a second.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

VLLM_VERSION=0.33.0
VENV=$ROOT/.venv-vllm
PY=$VENV/bin/python
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

# Distributions (not module names) that vLLM's CPU-importable modules need, found by importing them.
PURE_PYTHON=(
    aiohttp cachetools cbor2 cloudpickle einops fastapi ijson llguidance mistral_common msgspec openai oss-harmony
    partial-json-parser pillow prometheus_client psutil py-cpuinfo pybase64 pydantic pyzmq regex requests
    uvloop xgrammar
    # codemask's own dependencies that vLLM pins (transformers<5.21, lark==1.2.2)
    huggingface_hub lark safetensors tokenizers transformers
)

log() { printf '[setup-vllm] %s\n' "$*" >&2; }
die() { printf '[setup-vllm] ERROR: %s\n' "$*" >&2; exit 1; }

quiet() {
    local what=$1; shift
    local out="$LOGS/step.log"
    if ! "$@" >"$out" 2>&1; then
        tail -n 40 "$out" >&2
        die "$what failed: $*"
    fi
}

stamp=$VENV/.codemask-vllm-$(cat "$0" pyproject.toml setup.py | sha256sum | cut -c1-16)
[[ -e $stamp ]] && exit 0

if [[ ! -x $PY ]]; then
    python=$(command -v python3.11 || command -v python3 || true)
    [[ -n $python ]] || die "no python3 found"
    log "creating $VENV with $python"
    quiet "creating .venv-vllm" "$python" -m venv "$VENV"
    quiet "upgrading pip" "$PY" -m pip install --upgrade pip
fi

# Nothing below may replace the CPU torch (a dependency asking for torch would pull a CUDA build).
constraints=$LOGS/constraints.txt
echo "torch==2.13.0" >"$constraints"

log "torch 2.13.0 (CPU build)"
quiet "installing torch" "$PY" -m pip install -c "$constraints" torch==2.13.0
log "vllm==$VLLM_VERSION without its dependencies"
quiet "installing vllm" "$PY" -m pip install --no-deps "vllm==$VLLM_VERSION"

# Each package at vLLM's own requirement where its metadata names one (e.g. xgrammar==0.2.8).
mapfile -t requirements < <("$PY" - "${PURE_PYTHON[@]}" <<'EOF'
import importlib.metadata as metadata
import re
import sys

wanted = {re.sub(r"[-_.]+", "-", name).lower(): name for name in sys.argv[1:]}
pinned = {}
for requirement in metadata.requires("vllm") or []:
    spec, _, marker = requirement.partition(";")
    if "extra ==" in marker:
        continue
    name = re.split(r"[\s\[<>=!~]", spec.strip(), maxsplit=1)[0]
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in wanted:
        pinned[key] = re.sub(r"\[[^\]]*\]", "", spec.strip())  # fastapi[standard] -> fastapi: no server extras
for key, name in wanted.items():
    print(pinned.get(key, name))
EOF
)
log "pure-Python dependencies: ${requirements[*]}"
quiet "installing vLLM's pure-Python dependencies" "$PY" -m pip install -c "$constraints" "${requirements[@]}"

log "codemask (editable) with pytest and pyrefly (the Python monitors' server)"
quiet "installing codemask" "$PY" -m pip install -c "$constraints" -e . "pytest>=8" "pyrefly==1.4.1" "${requirements[@]}"

VLLM_TARGET_DEVICE=cpu "$PY" - <<'EOF' || die "vLLM's modules do not import in .venv-vllm"
import importlib.metadata as metadata

import torch
import vllm.v1.structured_output  # noqa: F401  (the manager and the xgrammar/guidance backends)
from vllm.v1.sample.logits_processor import build_logitsprocs  # noqa: F401

assert torch.__version__.startswith("2.13.0"), torch.__version__
print(f"[setup-vllm] vllm {metadata.version('vllm')} on torch {torch.__version__}: modules import")
EOF
rm -f "$VENV"/.codemask-vllm-* && touch "$stamp"

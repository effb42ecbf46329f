#!/usr/bin/env bash
# Set up the benchmarks' own virtual environment, benchmarks/.venv, beside the project's .venv:
# codemask (editable) and its peers xgrammar, llguidance and outlines-core installed side by side,
# so that one process measures all of them on the same tokens.
#   1. torch 2.13.0 first (the CPU wheel: a plain `torch`, or a peer that depends on it, would pull
#      a multi-GB CUDA build),
#   2. the peers, transformers/tokenizers, matplotlib, numpy, and codemask editable,
#   3. a check that torch is still 2.13.0+cpu and that no nvidia-* CUDA wheels came along.
# The tokenizers themselves come from the project's scripts/setup.sh ($CODEMASK_HOME/tokenizers).
# Idempotent: a second run only checks, in a few seconds.
#
# Usage: bash benchmarks/setup.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$ROOT/benchmarks/.venv
PY=$VENV/bin/python
TORCH=2.13.0
XGRAMMAR=0.2.8
PACKAGES=("xgrammar==$XGRAMMAR" llguidance outlines-core transformers tokenizers matplotlib numpy)
STAMP=$VENV/.bench-setup-$(printf '%s\n' "${PACKAGES[@]}" | cat - "$ROOT"/pyproject.toml "$ROOT"/setup.py 2>/dev/null | sha256sum | cut -c1-16)
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

log() { printf '[bench-setup] %s\n' "$*" >&2; }
die() { printf '[bench-setup] ERROR: %s\n' "$*" >&2; exit 1; }

# Run a command with its output in a log file; on failure show the end of the log and stop.
quiet() {
    local what=$1; shift
    if ! "$@" >"$LOGS/step.log" 2>&1; then
        tail -n 40 "$LOGS/step.log" >&2
        die "$what failed: $*"
    fi
}

installed_version() {
    "$PY" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1"
}

if [[ ! -x $PY ]]; then
    python=$(command -v python3.11 || command -v python3 || true)
    [[ -n $python ]] || die "no python3 found; install Python 3.10 or newer"
    log "creating $VENV with $python"
    quiet "creating the venv" "$python" -m venv "$VENV"
    quiet "upgrading pip" "$PY" -m pip install --upgrade pip
fi

if [[ $(installed_version torch) != $TORCH* ]]; then
    log "installing torch $TORCH (CPU build)"
    quiet "installing torch" "$PY" -m pip install "torch==$TORCH"
fi

if [[ ! -e $STAMP ]]; then
    log "installing the peers and codemask (editable)"
    # The constraint keeps pip from replacing torch while it resolves the peers' dependencies.
    echo "torch==$TORCH" >"$LOGS/constraints.txt"
    quiet "installing the peers" "$PY" -m pip install -c "$LOGS/constraints.txt" "${PACKAGES[@]}"
    quiet "installing codemask" "$PY" -m pip install -c "$LOGS/constraints.txt" -e "$ROOT"
fi

# Whatever happened above (or by hand since): no CUDA wheels, and the CPU torch still in place.
mapfile -t cuda < <("$PY" -m pip list --format=freeze 2>/dev/null | grep -i '^nvidia-' | cut -d= -f1 || true)
if [[ ${#cuda[@]} -gt 0 ]]; then
    log "removing CUDA wheels dragged in by a dependency: ${cuda[*]}"
    quiet "removing CUDA wheels" "$PY" -m pip uninstall -y "${cuda[@]}"
fi
version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) || die "torch does not import"
[[ $version == "$TORCH+cpu" ]] || die "torch is $version, expected $TORCH+cpu: rm -rf $VENV and run again"
touch "$STAMP"

"$PY" - <<'EOF'
import importlib.metadata as m
names = ["torch", "xgrammar", "llguidance", "outlines_core", "transformers", "tokenizers", "numpy", "codemask"]
print("[bench-setup] ready: " + ", ".join(f"{n} {m.version(n)}" for n in names))
EOF

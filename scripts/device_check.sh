#!/usr/bin/env bash
# The one command for a lent GPU machine: install what codemask needs from the carried wheelhouse, build
# its C extension, run benchmarks/gpu_check.py and keep everything under $OUT.
#
# The machine has no network and its own torch/Triton/transformers, which must stay: only packages that do
# not import are installed, from .device/wheels alone (--no-index, so nothing can replace torch), and a
# failed install falls back to --no-deps into a separate folder. The C extension is optional (the engine
# falls back to numpy without it), so a failed build is reported and the run goes on. The tokenizer and
# model config come from .device/qwen2.5-coder-0.5b (both folders are carried: .git/info/exclude ignores
# .device). Arguments go to gpu_check.py, e.g. `bash scripts/device_check.sh --quick`.
#
# Writes $OUT/{nvidia-smi.txt,setup.log,gpu_check.log,gpu_check.json,gpu_check.md}; exits with gpu_check's status.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/gpu_check}
PY=${PYTHON:-python3}
WHEELS=.device/wheels
CHECK_TIMEOUT_S=${GPU_CHECK_TIMEOUT_S:-480}
mkdir -p "$OUT"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

log() { echo "[device_check $(date -u +%H:%M:%S)] $*" | tee -a "$OUT/setup.log"; }

torch_version() { "$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "none"; }

install_missing() {
    # codemask's dependencies (pyproject.toml) as module:distribution; the wheelhouse holds these (and their
    # own dependencies), while numpy, torch, transformers and tokenizers must be the machine's
    local pairs="lark:lark jsonschema:jsonschema tqdm:tqdm tree_sitter:tree-sitter
                 tree_sitter_python:tree-sitter-python tree_sitter_go:tree-sitter-go"
    local missing=() module
    for module in numpy torch transformers tokenizers; do
        "$PY" -c "import $module" 2>/dev/null || log "WARNING: $module does not import and is not in $WHEELS"
    done
    for pair in $pairs; do
        "$PY" -c "import ${pair%%:*}" 2>/dev/null || missing+=("${pair#*:}")
    done
    if ((${#missing[@]} == 0)); then
        log "codemask's dependencies import already"
        return
    fi
    log "installing from $WHEELS: ${missing[*]}"
    if "$PY" -m pip install -q --no-index --find-links "$WHEELS" --no-cache-dir "${missing[@]}" >>"$OUT/setup.log" 2>&1; then
        return
    fi
    log "pip install failed; installing every wheel with --no-deps into /tmp/codemask-site"
    "$PY" -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/codemask-site "$WHEELS"/*.whl \
        >>"$OUT/setup.log" 2>&1 || log "the --no-deps install failed too (see setup.log)"
    EXTRA_PATH=/tmp/codemask-site
}

build_native() {
    # codemask.engine._native for this interpreter: setup.py first, a direct compile where setuptools is too old
    local suffix include target
    suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    target="src/codemask/engine/_native$suffix"
    log "building $target"
    "$PY" setup.py -q build_ext --inplace >>"$OUT/setup.log" 2>&1 || log "setup.py build_ext failed (see setup.log)"
    if [[ ! -f $target ]]; then
        include=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
        log "compiling directly against $include"
        ${CC:-cc} -O2 -std=c99 -shared -fPIC -I"$include" src/codemask/engine/_native*.c -o "$target" \
            >>"$OUT/setup.log" 2>&1 || log "direct compile failed: masks will use numpy (see setup.log)"
    fi
}

EXTRA_PATH=""
log "repo $ROOT, python $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)'), OUT=$OUT"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed"
TORCH_BEFORE=$(torch_version)
log "torch $TORCH_BEFORE"
install_missing
build_native
TORCH_AFTER=$(torch_version)
[[ $TORCH_AFTER == "$TORCH_BEFORE" ]] || log "WARNING: torch changed from $TORCH_BEFORE to $TORCH_AFTER"
export PYTHONPATH="src:benchmarks${EXTRA_PATH:+:$EXTRA_PATH}${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c 'from codemask.engine import native; print("codemask C extension loaded:", native.available())' 2>&1 \
    | tee -a "$OUT/setup.log"

log "running benchmarks/gpu_check.py (limit ${CHECK_TIMEOUT_S}s)"
timeout "$CHECK_TIMEOUT_S" "$PY" benchmarks/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
status=${PIPESTATUS[0]}
nvidia-smi --query-gpu=name,memory.used,memory.total,temperature.gpu,clocks.sm --format=csv \
    >>"$OUT/nvidia-smi.txt" 2>&1 || true
log "gpu_check exited with $status; results in $OUT"
exit "$status"

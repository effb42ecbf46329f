#!/usr/bin/env bash
# Fill .device/ (git-ignored) with what scripts/device_check.sh needs on a GPU machine that has no network:
#   .device/qwen2.5-coder-0.5b/  the packaged model's config, generation config, chat template and tokenizer
#                                (no weights: gpu_check builds the model with random weights),
#   .device/wheels/              codemask's pure-Python and Python 3.12 x86_64 dependency wheels (not torch).
# Run it after scripts/setup.sh --models qwen-coder; then hand .device to the device run as a carried path.
# Usage: bash scripts/prepare_device.sh [--python-version 3.12]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON_VERSION=3.12
[[ ${1:-} == --python-version ]] && PYTHON_VERSION=${2:?--python-version needs a value}
MODEL=${CODEMASK_HOME:-$HOME/.cache/codemask}/models/qwen2.5-coder-0.5b
[[ -f $MODEL/tokenizer.json ]] || { echo "no packaged Qwen2.5-Coder at $MODEL: run scripts/setup.sh --models qwen-coder" >&2; exit 1; }

mkdir -p .device/qwen2.5-coder-0.5b .device/wheels
for file in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
    [[ -f $MODEL/$file ]] && cp "$MODEL/$file" .device/qwen2.5-coder-0.5b/
done
.venv/bin/python -m pip download -q --only-binary=:all: --python-version "$PYTHON_VERSION" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d .device/wheels lark jsonschema tqdm tree-sitter tree-sitter-python tree-sitter-go
du -sh .device

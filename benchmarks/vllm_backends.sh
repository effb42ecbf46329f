#!/usr/bin/env bash
# On a lent GPU machine: time vLLM's structured-output backends (codemask, xgrammar, guidance) on the
# same requests when the machine's Python has vLLM, else check codemask's masks on the GPU
# (benchmarks/vllm_backends.py says what each mode does). codemask runs from src/ (no install needed).
#   MODEL=DIR bash benchmarks/vllm_backends.sh [extra arguments for vllm_backends.py]
# MODEL: a model folder (config.json + tokenizer; weights only with --load-format auto), default the
# packaged Qwen2.5-Coder-0.5B folder when it is installed. PYTHON: the interpreter (default python3).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
MODEL=${MODEL:-${CODEMASK_HOME:-$HOME/.cache/codemask}/models/qwen2.5-coder-0.5b}
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE
"$PYTHON" -c 'import torch; print("[vllm_backends] torch", torch.__version__, "cuda", torch.cuda.is_available())'
model_args=()
[[ -f $MODEL/config.json ]] && model_args=(--model "$MODEL")
exec "$PYTHON" benchmarks/vllm_backends.py "${model_args[@]}" "$@"

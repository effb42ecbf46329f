"""One adapter per grammar engine, all with the same interface, for benchmarks that compare them.

Every adapter is built for one tokenizer (the same Hugging Face tokenizer object, the same vocabulary
size and the same single EOS id for all engines) and offers:

- ``compile(kind, text) -> (compiled, seconds)``: a cold compile (fresh compiler, empty caches);
- ``compile_cached(kind, text) -> {"memory": s | None, "disk": s | None}``: the engine's own caches;
- ``new_matcher(compiled)``, ``fill_mask(matcher, bitmask)`` (the timed call), ``accept(matcher, id)``.

``kind`` is ``"json"`` (the engine's builtin JSON grammar; ``text`` is ignored) or ``"gbnf"`` (a
llama.cpp GBNF grammar in ``text``). An engine that cannot run a workload raises `Unsupported` with the
reason. The bitmask is a ``[1, ceil(vocab/32)]`` int32 torch tensor on the CPU: the format all four
engines share. Engines are imported lazily, so this module imports without any of them.
"""

from __future__ import annotations

import json
import pickle
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

# The JSON language every engine is asked for: a top-level object or array (XGrammar's builtin JSON
# grammar accepts nothing else), any JSON inside. Engines without a builtin get it as a JSON Schema.
JSON_TOP_LEVEL_SCHEMA = {"type": ["object", "array"]}
# llguidance's JSON strings are narrower than JSON by default (no \uXXXX escapes of printable
# characters); this is as close to full JSON as its options go (it still refuses "\/" and raw DEL).
LLGUIDANCE_JSON_OPTIONS = {"json_allow_general_unicode_escapes": True}


class Unsupported(Exception):
    """The engine cannot run this workload; the message says why (reported as n/a)."""


def _seconds_since(start: int) -> float:
    return (time.perf_counter_ns() - start) / 1e9


class EngineAdapter(ABC):
    """The interface the benchmark drives; subclasses wrap one engine's own API."""

    name: ClassVar[str]

    def __init__(self, tokenizer: Any, vocab_size: int, eos_id: int, threads: int = 1) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_id = eos_id
        self.threads = threads
        self._temp_dirs: list[Path] = []
        start = time.perf_counter_ns()
        self._setup()
        self.setup_seconds = _seconds_since(start)

    @property
    def version(self) -> str:
        from importlib.metadata import version

        return version(self.name.replace("_", "-"))

    @abstractmethod
    def _setup(self) -> None:
        """Build the engine's view of the vocabulary (timed separately from compiling)."""

    @abstractmethod
    def compile(self, kind: str, text: str | None) -> tuple[Any, float]:
        """A cold compile: fresh compiler, no cache hit. Returns the compiled grammar and seconds."""

    def compile_cached(self, kind: str, text: str | None) -> dict[str, float | None]:
        """Seconds to get the compiled grammar again from the engine's caches (None: no such cache)."""
        return {"memory": None, "disk": None}

    @abstractmethod
    def new_matcher(self, compiled: Any) -> Any:
        """A matcher at the start of the grammar."""

    @abstractmethod
    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        """Write the next-token mask into row 0 of ``bitmask`` (the timed call)."""

    @abstractmethod
    def accept(self, matcher: Any, token_id: int) -> bool:
        """Advance by one token; False if the engine refuses it."""

    def _temp_dir(self) -> Path:
        """A scratch folder for caches and serialised grammars, removed by `close`."""
        path = Path(tempfile.mkdtemp(prefix=f"{self.name}-bench-"))
        self._temp_dirs.append(path)
        return path

    def close(self) -> None:
        """Remove the scratch folders."""
        for path in self._temp_dirs:
            shutil.rmtree(path, ignore_errors=True)


class CodemaskAdapter(EngineAdapter):
    """codemask through its public API; cold = empty disk-cache folder, cached = a new compiler on it."""

    name = "codemask"

    def _setup(self) -> None:
        import codemask

        self._api = codemask
        self.vocab = codemask.Vocabulary.from_tokenizer(self.tokenizer, vocab_size=self.vocab_size,
                                                        stop_token_ids=[self.eos_id])
        codemask.GrammarCompiler(self.vocab, cache_dir=False)  # (its first compiler builds the vocabulary's trie)
        self._cache_root = self._temp_dir()
        self._warm_compiler: Any = None

    def _grammar(self, kind: str, text: str | None) -> Any:
        if kind == "json":
            return self._api.Grammar.builtin("json")
        if kind == "gbnf":
            assert text is not None
            return self._api.Grammar.from_ebnf(text)
        raise Unsupported(f"unknown grammar kind {kind!r}")

    def compile(self, kind: str, text: str | None) -> tuple[Any, float]:
        from codemask.engine.compiler import forget_shared_work

        cache_dir = self._cache_root / kind
        shutil.rmtree(cache_dir, ignore_errors=True)
        forget_shared_work()  # (rule automata and shared positions of an earlier compile in this process)
        start = time.perf_counter_ns()
        compiler = self._api.GrammarCompiler(self.vocab, cache_dir=cache_dir, progress=False)
        compiled = compiler.compile(self._grammar(kind, text))
        seconds = _seconds_since(start)
        self._warm_compiler = compiler
        return compiled, seconds

    def compile_cached(self, kind: str, text: str | None) -> dict[str, float | None]:
        start = time.perf_counter_ns()
        self._warm_compiler.compile(self._grammar(kind, text))
        memory = _seconds_since(start)
        start = time.perf_counter_ns()
        compiler = self._api.GrammarCompiler(self.vocab, cache_dir=self._cache_root / kind, progress=False)
        compiler.compile(self._grammar(kind, text))
        return {"memory": memory, "disk": _seconds_since(start)}

    def new_matcher(self, compiled: Any) -> Any:
        return self._api.GrammarMatcher(compiled)

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        matcher.fill_next_token_bitmask(bitmask, 0)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.accept_token(token_id))


class XGrammarAdapter(EngineAdapter):
    """XGrammar: builtin JSON grammar; ``max_threads`` = the benchmark's thread count (default 1).

    Cached: its compiler's in-memory cache, and ``CompiledGrammar.deserialize_json`` of a file
    written by ``serialize_json`` (its only persistent form; XGrammar keeps no disk cache itself).
    """

    name = "xgrammar"

    def _setup(self) -> None:
        import xgrammar

        self._xgr = xgrammar
        self.info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                             stop_token_ids=[self.eos_id])
        self._compiler: Any = None
        self._serialized: dict[str, Path] = {}
        self._tmp = self._temp_dir()

    def _compile_with(self, compiler: Any, kind: str, text: str | None) -> Any:
        if kind == "json":
            return compiler.compile_builtin_json_grammar()
        if kind == "gbnf":
            return compiler.compile_grammar(text)
        raise Unsupported(f"unknown grammar kind {kind!r}")

    def compile(self, kind: str, text: str | None) -> tuple[Any, float]:
        start = time.perf_counter_ns()
        compiler = self._xgr.GrammarCompiler(self.info, max_threads=self.threads, cache_enabled=True)
        compiled = self._compile_with(compiler, kind, text)
        seconds = _seconds_since(start)
        self._compiler = compiler
        path = self._tmp / f"{kind}.json"
        path.write_text(compiled.serialize_json())
        self._serialized[kind] = path
        return compiled, seconds

    def compile_cached(self, kind: str, text: str | None) -> dict[str, float | None]:
        start = time.perf_counter_ns()
        self._compile_with(self._compiler, kind, text)
        memory = _seconds_since(start)
        start = time.perf_counter_ns()
        self._xgr.CompiledGrammar.deserialize_json(self._serialized[kind].read_text(), self.info)
        return {"memory": memory, "disk": _seconds_since(start)}

    def new_matcher(self, compiled: Any) -> Any:
        return self._xgr.GrammarMatcher(compiled)

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        matcher.fill_next_token_bitmask(bitmask, 0)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.accept_token(token_id))


class LLGuidanceAdapter(EngineAdapter):
    """llguidance: JSON as the JSON Schema ``{"type": ["object", "array"]}`` (with
    `LLGUIDANCE_JSON_OPTIONS`), GBNF via its own GBNF-to-Lark converter.

    llguidance has no compiled-grammar object: constructing an ``LLMatcher`` builds the lexer and
    parser, and token masks are computed lazily, so "compile" is the first matcher's construction
    and there is nothing to cache (both cached times are n/a). Later matchers are constructed anew
    per document, as serving engines do, and that time is reported as matcher creation.
    Mask computation on one matcher is single-threaded (its thread pool serves only batches).
    """

    name = "llguidance"

    def _setup(self) -> None:
        import llguidance
        import llguidance.hf

        self._llg = llguidance
        try:
            self.lltok = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size, eos_token=self.eos_id)
        except ValueError:  # not a PreTrainedTokenizerFast subclass: hand over the tokenizer.json text
            self.lltok = llguidance.LLTokenizer(self.tokenizer.backend_tokenizer.to_str(), n_vocab=self.vocab_size,
                                                eos_token=self.eos_id)

    def _grammar(self, kind: str, text: str | None) -> str:
        if kind == "json":
            return str(self._llg.LLMatcher.grammar_from_json_schema(JSON_TOP_LEVEL_SCHEMA,
                                                                    overrides=LLGUIDANCE_JSON_OPTIONS))
        if kind == "gbnf":
            assert text is not None
            return str(self._llg.grammar_from("gbnf", text))
        raise Unsupported(f"unknown grammar kind {kind!r}")

    def _matcher(self, grammar: str) -> Any:
        matcher = self._llg.LLMatcher(self.lltok, grammar, log_level=0)
        if matcher.is_error():
            raise Unsupported(f"llguidance rejects the grammar: {matcher.get_error()}")
        return matcher

    def compile(self, kind: str, text: str | None) -> tuple[Any, float]:
        start = time.perf_counter_ns()
        grammar = self._grammar(kind, text)
        self._matcher(grammar)
        return grammar, _seconds_since(start)

    def new_matcher(self, compiled: Any) -> Any:
        return self._matcher(compiled)

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        matcher.unsafe_compute_mask_ptr(bitmask.data_ptr(), bitmask.shape[1] * 4)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.consume_token(token_id)) and not matcher.is_error()


class OutlinesCoreAdapter(EngineAdapter):
    """outlines-core: a regex index (a DFA over tokens), so no CFG.

    JSON: the regex its JSON-Schema converter produces for ``{"type": ["object", "array"]}``, which
    unrolls nesting to a fixed depth (``max_recursion_depth``, default 3) and allows only ``[ ]?`` as
    whitespace: arbitrary JSON within those limits. GBNF: n/a. Cached: pickling the ``Index`` to a
    file and loading it back (outlines-core's only persistent form; it keeps no cache itself).
    """

    name = "outlines_core"

    def _setup(self) -> None:
        import outlines_core

        self._oc = outlines_core
        table: dict[bytes, list[int]] = {}
        for token, token_id in self.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False).items():
            if token_id != self.eos_id:
                table.setdefault(byte_level_token_bytes(token), []).append(token_id)
        self.vocabulary = outlines_core.Vocabulary(self.eos_id, table)
        self._pickled: dict[str, Path] = {}
        self._tmp = self._temp_dir()

    def compile(self, kind: str, text: str | None) -> tuple[Any, float]:
        if kind != "json":
            raise Unsupported("outlines-core has no context-free grammars (regex / JSON Schema only)")
        from outlines_core.json_schema import build_regex_from_schema

        start = time.perf_counter_ns()
        index = self._oc.Index(build_regex_from_schema(json.dumps(JSON_TOP_LEVEL_SCHEMA)), self.vocabulary)
        seconds = _seconds_since(start)
        path = self._tmp / f"{kind}.pkl"
        path.write_bytes(pickle.dumps(index))
        self._pickled[kind] = path
        return index, seconds

    def compile_cached(self, kind: str, text: str | None) -> dict[str, float | None]:
        start = time.perf_counter_ns()
        pickle.loads(self._pickled[kind].read_bytes())
        return {"memory": None, "disk": _seconds_since(start)}

    def new_matcher(self, compiled: Any) -> Any:
        return self._oc.Guide(compiled)

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        matcher.write_mask_into(bitmask.data_ptr(), bitmask.shape[1], 4)

    def accept(self, matcher: Any, token_id: int) -> bool:
        if token_id == self.eos_id:  # a Guide has no transition on EOS: it is allowed where the regex may end
            return bool(matcher.is_finished())
        try:
            matcher.advance(token_id, return_tokens=False)
        except ValueError:
            return False
        return True


ENGINES: dict[str, type[EngineAdapter]] = {
    cls.name: cls for cls in (CodemaskAdapter, XGrammarAdapter, LLGuidanceAdapter, OutlinesCoreAdapter)
}


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the printable character that stands for each byte."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = dict(zip(printable, printable, strict=True))
    shifted = 0x100
    for byte in range(256):
        if byte not in chars:
            chars[byte] = shifted
            shifted += 1
    return {chr(char): byte for byte, char in chars.items()}


_BYTE_OF_CHAR = _byte_level_alphabet()


def byte_level_token_bytes(token: str) -> bytes:
    """The bytes of a byte-level BPE token string (Llama-3, Qwen, GPT-2 spell bytes as characters)."""
    return bytes(_BYTE_OF_CHAR[ch] for ch in token)

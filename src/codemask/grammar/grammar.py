"""`Grammar`: the user-facing handle on a grammar, whatever it was written in.

Every constructor runs a front-end that produces the shared IR (:mod:`codemask.grammar.ir`);
the engine only ever sees that IR. A `Grammar` also remembers a hash of its canonical text (of
a JSON Schema's, for schemas), which (with the vocabulary's fingerprint) keys the compile cache.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.metadata
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codemask.errors import GrammarError, InvalidSchemaError
from codemask.grammar.ir import GrammarIR, grammar_text
from codemask.source_digest import files_digest

ITEM_PENALTY = 0.5
"""The default decay per repeated JSON array item when generating (`Grammar.from_json_schema`)."""


class Grammar:
    """A grammar in the engine's IR, built by one of the ``from_*`` constructors."""

    def __init__(self, ir: GrammarIR, kind: str) -> None:
        if ir.start not in ir.rules:
            raise GrammarError(f"start rule {ir.start!r} is not defined")
        self._ir: GrammarIR | None = ir
        self._start = ir.start
        self.kind = kind
        self._key: str | None = None
        self.completion: dict[str, Any] = {}  # GrammarMatcher options: prefix, until, suffix
        self.builtin_name: str | None = None  # the name it was loaded by (`builtin`), if any
        self.output: str | None = None  # "json" when every text it accepts is one JSON document
        self.output_model: Any = None  # the pydantic class a JSON output is parsed into, if any
        # JSON generation: the decay per repeated array item (`codemask.decoding.json_items`), or None
        self.item_penalty: float | None = None

    @property
    def ir(self) -> GrammarIR:
        """The grammar's rules (`codemask.grammar.ir`)."""
        if self._ir is None:
            raise GrammarError("this is a compiled grammar's record of its grammar, without the rules "
                               "(CompiledGrammar.grammar): read them from the Grammar that was compiled")
        return self._ir

    def detached(self) -> Grammar:
        """This grammar without its rules: its kind, options, output and cache key — what a compiled
        grammar keeps of it. The rules are tens of thousands of small objects for a large schema,
        which Python's garbage collector walks in every full collection for as long as they live (a
        5-7 ms pause in the middle of decoding, and a server keeps many compiled grammars)."""
        record = copy.copy(self)
        record._key = self.cache_key
        record._ir = None
        return record

    @property
    def cache_key(self) -> str:
        """A hash of the grammar's canonical text, or of a JSON Schema's (`_json_schema_key`):
        equal keys share compiled artefacts."""
        if self._key is None:
            self._key = hashlib.sha256(grammar_text(self.ir).encode("utf-8")).hexdigest()
        return self._key

    def __repr__(self) -> str:
        rules = "detached" if self._ir is None else len(self._ir.rules)
        return f"Grammar(kind={self.kind!r}, rules={rules}, start={self._start!r})"

    @classmethod
    def from_ebnf(cls, text: str, start: str = "root", *, source: str = "<ebnf>") -> Grammar:
        """GBNF as llama.cpp writes it, or XGrammar's EBNF dialect (``{m,n}``, lookahead ``(= …)``)."""
        from codemask.grammar.ebnf import parse_ebnf

        return cls(parse_ebnf(text, start=start, source=source), "ebnf")

    @classmethod
    def from_lark(cls, text: str, start: str = "start", *, source: str = "<lark>") -> Grammar:
        """A Lark grammar, matched with Lark's contextual-lexer semantics."""
        from codemask.grammar.lark import parse_lark

        return cls(parse_lark(text, start=start, source=source), "lark")

    @classmethod
    def from_regex(cls, pattern: str) -> Grammar:
        """A Python ``re`` pattern, matched in full (as ``re.fullmatch`` would)."""
        from codemask.grammar.regex import regex_grammar

        return cls(regex_grammar(pattern), "regex")

    @classmethod
    def from_json_schema(cls, schema: Any, *, mode: str = "generate", strict: bool = True,
                         whitespace: str | int = "flexible", item_penalty: float | None = ITEM_PENALTY) -> Grammar:
        """JSON documents valid against a JSON Schema (a dict, a bool, or JSON text).

        ``mode="generate"`` (the default) is what a model should write: each named key at most
        once, in the schema's order, every ``required`` key, no key the schema does not declare
        (``additionalProperties``/``patternProperties``/``unevaluatedProperties``), whitespace
        bounded. ``mode="validate"`` accepts exactly the documents the schema accepts, in any key
        order, for checking documents. ``whitespace``: ``"flexible"``, ``"compact"`` (none) or an
        indent width (exactly ``json.dumps(value, indent=n)``'s layout). ``strict=True`` raises
        :class:`~codemask.errors.UnsupportedSchemaError` (naming the keyword and its JSON pointer)
        for what cannot be compiled exactly; ``strict=False`` warns once per keyword and accepts a
        superset. ``item_penalty`` (generation): when an array ends with ``n >= 2`` identical items,
        the tokens starting one more are decayed by ``item_penalty ** (n - 1)`` and what they lose goes
        to closing the array where the schema allows it (None: off). See docs/guides/json-schema.md for what
        is exact in each mode.
        """
        from codemask.grammar.json_schema import json_schema_ir

        if isinstance(schema, (str, bytes)):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise InvalidSchemaError(f"the schema is not valid JSON: {exc}") from None
            except RecursionError:
                raise InvalidSchemaError("the schema nests too deep to read") from None
        grammar = cls(json_schema_ir(schema, mode=mode, strict=strict, whitespace=whitespace), "json_schema")
        grammar._key = _json_schema_key(schema, mode, strict, whitespace)
        grammar.output = "json"
        grammar.item_penalty = item_penalty if mode == "generate" else None
        return grammar

    @classmethod
    def from_pydantic(cls, model: Any, *, mode: str = "generate", strict: bool = True,
                      whitespace: str | int = "flexible") -> Grammar:
        """The JSON a pydantic model validates, from its ``model_json_schema()``; a generation's
        ``result.parsed`` is then an instance of ``model``."""
        schema_of = getattr(model, "model_json_schema", None)
        if schema_of is None or not isinstance(model, type):
            raise TypeError(f"from_pydantic takes a pydantic BaseModel class, not {model!r}")
        grammar = cls.from_json_schema(schema_of(), mode=mode, strict=strict, whitespace=whitespace)
        grammar.output_model = model
        return grammar

    @classmethod
    def from_tags(cls, tags: Sequence[Any], triggers: Sequence[str] | None = None, *, at_least_one: bool = False,
                  stop_after_first: bool = False, text_first: bool = True) -> Grammar:
        """Free text in which each trigger starts one of ``tags`` (:class:`~codemask.grammar.structural.Tag`:
        ``begin``, a ``content`` grammar, ``end``), e.g. a reasoning model's answer after ``</think>``
        or tool calls between ``<tool_call>`` and ``</tool_call>``. Triggers default to the tags'
        begins; after a tag the text is free again (or ends, ``stop_after_first``); with
        ``at_least_one`` the output cannot end before a tag, and with ``text_first=False`` it begins
        with one (a required tool call). See docs/guides/json-schema.md."""
        from codemask.grammar.structural import structural_ir

        return cls(structural_ir(list(tags), triggers, at_least_one=at_least_one,
                                 stop_after_first=stop_after_first, text_first=text_first), "structural")

    @classmethod
    def from_structural_tag(cls, spec: Any) -> Grammar:
        """A structural tag as vLLM and xgrammar take it (a dict or JSON text): ``{"structures":
        [{"begin", "schema", "end"}], "triggers": [...]}`` or ``{"type": "structural_tag", "format":
        {"type": "triggered_tags", ...}}``."""
        from codemask.grammar.structural import from_spec

        tags, triggers, at_least_one, stop_after_first = from_spec(spec)
        return cls.from_tags(tags, triggers, at_least_one=at_least_one, stop_after_first=stop_after_first)

    @classmethod
    def builtin(cls, name: str, *, until: str | None = None, prefix: str | bytes = b"",
                suffix: str | bytes | None = None) -> Grammar:
        """A grammar shipped with codemask (``"json"``, ``"python"``, …), by name.

        ``until``, ``prefix`` and ``suffix`` make it a code-completion grammar (see
        :meth:`for_completion`).
        """
        from codemask.grammar.builtin import load_builtin

        grammar = load_builtin(name)
        if until is None and not prefix and suffix is None:
            return grammar
        return grammar.for_completion(until=until, prefix=prefix, suffix=suffix)

    def for_completion(self, *, until: str | None = None, prefix: str | bytes = b"",
                       suffix: str | bytes | None = None) -> Grammar:
        """This grammar for completing code at a cursor (docs/guides/code-completion.md).

        ``prefix``: the file up to the cursor, accepted before the completion starts. ``until``:
        ``"line"``, ``"statement"``, ``"block"`` or ``"function"`` — the completion may end (EOS)
        where that unit, counted from the cursor, is complete, and nothing may follow it
        (grammars with Python-style indentation). ``suffix``: the file after the cursor
        (fill-in-the-middle) — EOS only where the suffix can follow. The compiled form is shared
        with the plain grammar; these options go to every `GrammarMatcher` made for it.
        """
        from codemask.engine.completion import MODES

        if until is not None and until not in MODES:
            raise GrammarError(f"until= must be one of {', '.join(MODES)} or None, got {until!r}")
        twin = copy.copy(self)
        twin.completion = {"prefix": prefix, "until": until, "suffix": suffix}
        return twin

    @classmethod
    def from_file(cls, path: str | Path, start: str | None = None) -> Grammar:
        """A grammar file: ``.lark`` is Lark; ``.gbnf``/``.ebnf``/``.bnf`` is EBNF."""
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise GrammarError(f"cannot read grammar file {file}: {exc}") from exc
        except UnicodeDecodeError as exc:
            line = exc.object.count(b"\n", 0, exc.start) + 1
            raise GrammarError(f"{file}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line}, "
                               f"offset {exc.start}); grammar files are read as UTF-8") from None
        if file.suffix == ".lark":
            return cls.from_lark(text, start=start or "start", source=str(file))
        if file.suffix in {".gbnf", ".ebnf", ".bnf"}:
            return cls.from_ebnf(text, start=start or "root", source=str(file))
        raise GrammarError(f"unknown grammar file type {file.suffix!r} (expected .lark, .gbnf, .ebnf or .bnf)")


def _json_schema_key(schema: Any, mode: str, strict: bool, whitespace: str | int) -> str:
    """The cache key of a schema's grammar from the schema's canonical JSON text (keys sorted)
    and the options: five times faster than from the grammar's text (20 against 110 µs at the
    median of JSONSchemaBench), and a server compiles a schema per request. The front-end has
    refused what JSON cannot hold (`nodes.check_json_values`), so the text is faithful: JSON
    writes 1, 1.0 and true apart. The front-ends' sources are part of the key: the same schema
    compiles differently after a change to them."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    head = f"json_schema\0{mode}\0{strict}\0{whitespace!r}\0{_front_end_fingerprint()}\0"
    return hashlib.sha256((head + text).encode("utf-8", "surrogatepass")).hexdigest()


@functools.cache
def _front_end_fingerprint() -> str:
    """A digest of the grammar package's sources (the front-ends and the IR) and of the versions of
    the libraries a JSON Schema's grammar depends on (`referencing` resolves its references,
    `jsonschema` and its specifications read its dialect): made once per process (10 ms)."""
    versions = "\0".join(importlib.metadata.version(name) for name in _SCHEMA_LIBRARIES)
    return files_digest(Path(__file__).parent, ("**/*.py",)) + versions


_SCHEMA_LIBRARIES = ("jsonschema", "jsonschema-specifications", "referencing")

"""JSON Schema → grammar (``Grammar.from_json_schema``).

The pieces: :mod:`.nodes` (subschemas with their base URI, draft and pointer), :mod:`.algebra`
(``allOf``/``anyOf``/``not``/``if`` rewritten to alternatives of plain constraints),
:mod:`.constraints` (keyword-wise conjunction), :mod:`.builder` (a rule per value, enums and
constants) with the rules per type in :mod:`.scalars`, :mod:`.arrays` and :mod:`.objects`,
:mod:`.evaluation` (what ``unevaluated*`` sees) and :mod:`.satisfies` (single values checked while
building), :mod:`.numbers` and :mod:`.strings` (exact ranges, multiples, escapes, patterns,
formats), :mod:`.regular` (intersections of regular languages) and :mod:`.layout` (whitespace).
See ``docs/guides/json-schema.md`` for what is exact and what is approximated.
"""

from __future__ import annotations

import warnings
from typing import Any

from codemask.engine.collection import collection_paused
from codemask.errors import GrammarError, UnsupportedSchemaError
from codemask.grammar.ir import GrammarIR, Rule, seq
from codemask.grammar.json_schema.builder import SchemaBuilder
from codemask.grammar.json_schema.layout import Layout
from codemask.grammar.json_schema.nodes import Document
from codemask.grammar.optimize import drop_unproductive

__all__ = ["MODES", "json_schema_ir"]


MODES = ("generate", "validate")


def json_schema_ir(schema: Any, *, mode: str = "generate", strict: bool = True,
                   whitespace: str | int = "flexible") -> GrammarIR:
    """The grammar of JSON documents valid against ``schema``: for writing them or for checking them.

    ``mode="generate"`` (the default) is the language a model should write: named keys at most
    once and in the schema's order, every required key, no key the schema does not declare, and
    whitespace bounded. ``mode="validate"`` accepts exactly the documents the schema accepts.
    ``strict=True`` raises :class:`~codemask.errors.UnsupportedSchemaError` for a construct that
    cannot be compiled exactly; ``strict=False`` warns once per keyword and accepts a superset.
    """
    if mode not in MODES:
        raise ValueError(f"mode= is 'generate' or 'validate', not {mode!r}")
    with collection_paused():  # (the schema's nodes and the rules' trees live until it ends)
        return _json_schema_ir(schema, mode == "generate", strict, whitespace)


def _json_schema_ir(schema: Any, generating: bool, strict: bool, whitespace: str | int) -> GrammarIR:
    layout = Layout(whitespace, bounded=generating)
    document = Document.load(schema, strict)
    builder = SchemaBuilder(layout, document, generating)
    value = builder.value([document.root_node()], 0)
    _warn_per_keyword(document.warnings)
    rules = {name: Rule(name, body, shared=name in builder.shared, standalone=name in builder.standalone)
             for name, body in builder.rules.items()}
    rules["root"] = Rule("root", seq(layout.around(), value, layout.around()))
    try:
        rules = drop_unproductive(rules, "root")
    except GrammarError:
        raise GrammarError("the schema accepts no JSON value: its constraints contradict each other "
                           "(or it is `false`)") from None
    return GrammarIR(rules, "root", productive=True)


def _warn_per_keyword(errors: list[UnsupportedSchemaError]) -> None:
    """One warning per keyword, naming every place it was widened."""
    by_keyword: dict[str, list[UnsupportedSchemaError]] = {}
    for error in errors:
        by_keyword.setdefault(error.keyword, []).append(error)
    for keyword, found in by_keyword.items():
        places = "; ".join(f"{e.pointer or '/'}: {e.detail}" if e.detail else (e.pointer or "/") for e in found[:5])
        more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
        warnings.warn(f"{keyword!r} is not enforced exactly at {places}{more}; accepting a superset", stacklevel=4)

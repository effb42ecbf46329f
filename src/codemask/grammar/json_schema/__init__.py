"""JSON Schema → grammar (``Grammar.from_json_schema``).

The pieces: :mod:`.nodes` (subschemas with their base URI, draft and pointer), :mod:`.algebra`
(``allOf``/``anyOf``/``not``/``if`` rewritten to alternatives of plain constraints),
:mod:`.constraints` (keyword-wise conjunction), :mod:`.builder` (rules per type), :mod:`.numbers`
and :mod:`.strings` (exact ranges, multiples, escapes, patterns, formats) and :mod:`.layout`
(whitespace). See ``docs/json-schema.md`` for what is exact and what is approximated.
"""

from __future__ import annotations

import warnings
from typing import Any

from codemask.errors import GrammarError
from codemask.grammar.ir import GrammarIR, Rule, seq
from codemask.grammar.json_schema.builder import SchemaBuilder
from codemask.grammar.json_schema.layout import Layout
from codemask.grammar.json_schema.nodes import Document
from codemask.grammar.optimize import drop_unproductive

__all__ = ["json_schema_ir"]


def json_schema_ir(schema: Any, *, strict: bool = True, whitespace: str | int = "flexible") -> GrammarIR:
    """The grammar of the JSON documents valid against ``schema``.

    ``strict=True`` raises :class:`~codemask.errors.UnsupportedSchemaError` for a construct that
    cannot be compiled exactly; ``strict=False`` warns and accepts a superset instead.
    """
    layout = Layout(whitespace)
    document = Document.load(schema, strict)
    builder = SchemaBuilder(layout)
    value = builder.value([document.root_node()], 0)
    for message in document.warnings:
        warnings.warn(f"{message}; accepting a superset", stacklevel=3)
    rules = {name: Rule(name, body, shared=name in builder.shared) for name, body in builder.rules.items()}
    rules["root"] = Rule("root", seq(layout.around(), value, layout.around()))
    try:
        drop_unproductive(rules, "root")
    except GrammarError:
        raise GrammarError("the schema accepts no JSON value: its constraints contradict each other "
                           "(or it is `false`)") from None
    return GrammarIR(rules, "root")

"""Structured output inside free text: text until a trigger, then the grammar that trigger names.

Reasoning models think in free text and answer in JSON after ``</think>``; tool-calling models write
prose and then ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``. A :class:`Tag` is one such
structure: its ``begin`` text, the grammar of its ``content`` (a JSON Schema, a pydantic class, any
byte-level :class:`~codemask.grammar.grammar.Grammar`) and its ``end`` text. A tag starts where the
text reaches one of the ``triggers`` (each tag's ``begin`` starts with one); elsewhere the text is
free, and it cannot contain a trigger except as the start of a tag.

The free text is a character automaton over the triggers (Aho-Corasick): a state per trigger prefix
the text currently ends with, a transition per character of the triggers and one class for every
other character. Reaching a whole trigger leaves the free text for the tags it begins; after a tag's
end the text is free again (or ends, with ``stop_after_first``). ``at_least_one`` keeps the end of the
output closed until a tag was written (a required tool call).

:func:`from_spec` reads the structural-tag formats vLLM and xgrammar take: the original
``{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`` and the newer
``{"type": "structural_tag", "format": {...}}`` with ``triggered_tags``, ``tag``, ``json_schema``,
``const_string``, ``any_text``, ``sequence``, ``regex`` and ``grammar`` formats.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from codemask.errors import GrammarError
from codemask.grammar.ir import (
    EMPTY,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    char_class,
    choice,
    literal,
    seq,
)
from codemask.grammar.ir import Sequence as Seq


@dataclass(frozen=True)
class Tag:
    """``begin``, then text of ``content``'s grammar (a Grammar, a JSON Schema dict, a pydantic class,
    a builtin name or EBNF text, as ``grammar=`` takes; None: any text up to ``end``), then ``end``."""

    begin: str
    content: Any
    end: str = ""


def structural_ir(tags: Sequence[Tag], triggers: Sequence[str] | None = None, *, at_least_one: bool = False,
                  stop_after_first: bool = False, text_first: bool = True) -> GrammarIR:
    """The grammar of free text with ``tags`` where it reaches ``triggers`` (default: each tag's begin).

    ``at_least_one``: the output cannot end before a tag; ``text_first=False``: it starts with one
    (no free text before the first tag: a required tool call); ``stop_after_first``: it ends after one.
    """
    if not tags:
        raise GrammarError("a structural grammar needs at least one tag")
    triggers = list(dict.fromkeys(triggers if triggers is not None else [t.begin for t in tags]))
    if not triggers or any(not t for t in triggers):
        raise GrammarError("structural triggers must be non-empty strings")
    rules: dict[str, Rule] = {}
    bodies: dict[str, list[Expr]] = {t: [] for t in triggers}
    for index, tag in enumerate(tags):
        trigger = next((t for t in triggers if tag.begin.startswith(t)), None)
        if trigger is None:
            raise GrammarError(f"tag {index} begins with {tag.begin!r}, which starts with none of the triggers "
                               f"{triggers!r}")
        content = _content_rule(tag, f"tag{index}_", rules)
        bodies[trigger].append(seq(literal(tag.begin[len(trigger):]), content, literal(tag.end)))
    for trigger, alternatives in bodies.items():
        rules[_tag_rule(trigger, triggers)] = Rule(_tag_rule(trigger, triggers), choice(*alternatives))
    _free_text(triggers, rules, at_least_one and text_first, stop_after_first)
    if text_first:
        return GrammarIR(rules, "text_0_0" if at_least_one else "text_1_0")
    after = EMPTY if stop_after_first else RuleRef("text_1_0")
    first = choice(*(seq(literal(t), RuleRef(_tag_rule(t, triggers)), after) for t in triggers))
    rules["first_tag"] = Rule("first_tag", first)
    return GrammarIR(rules, "first_tag")


def _tag_rule(trigger: str, triggers: list[str]) -> str:
    return f"after_trigger_{triggers.index(trigger)}"


def _content_rule(tag: Tag, prefix: str, rules: dict[str, Rule]) -> Expr:
    """A reference to the tag's content, its grammar's rules copied in under ``prefix``."""
    if tag.content is None:
        return _text_until(tag.end, prefix, rules)
    from codemask.grammar.resolve import as_grammar

    grammar = as_grammar(tag.content)
    if grammar.ir.lexer_mode:
        raise GrammarError("a tag's content must be a byte-level grammar (EBNF, regex, JSON Schema), "
                           "not a Lark grammar with a lexer")
    for name, rule in grammar.ir.rules.items():
        renamed = replace(rule, name=prefix + name, body=_renamed(rule.body, prefix),
                          lookahead=None if rule.lookahead is None else _renamed(rule.lookahead, prefix))
        rules[renamed.name] = renamed
    return RuleRef(prefix + grammar.ir.start)


def _renamed(expr: Expr, prefix: str) -> Expr:
    if isinstance(expr, RuleRef):
        return RuleRef(prefix + expr.name)
    if isinstance(expr, Seq):
        return Seq(tuple(_renamed(item, prefix) for item in expr.items))
    if isinstance(expr, Choice):
        return Choice(tuple(_renamed(item, prefix) for item in expr.alternatives))
    if isinstance(expr, Repeat):
        return Repeat(_renamed(expr.item, prefix), expr.min, expr.max)
    return expr


def _text_until(end: str, prefix: str, rules: dict[str, Rule]) -> Expr:
    """Any text that does not contain ``end`` (a tag's free content)."""
    if not end:
        raise GrammarError("a tag with free content needs an end text")
    automaton = _automaton([end])
    for state in range(len(automaton.prefixes)):
        options: list[Expr] = [EMPTY]
        for char, target in automaton.moves[state].items():
            if target is not None:
                options.append(seq(literal(char), RuleRef(f"{prefix}free_{target}")))
        options.append(seq(automaton.other, RuleRef(f"{prefix}free_0")))
        rules[f"{prefix}free_{state}"] = Rule(f"{prefix}free_{state}", choice(*options))
    return RuleRef(f"{prefix}free_0")


@dataclass
class _Automaton:
    """Aho-Corasick over characters: ``prefixes[s]`` is state ``s``'s text; ``moves[s][c]`` the next
    state (None where ``c`` completes a trigger, ``completes[s][c]`` which); ``other`` the class of
    characters in no trigger (they lead to state 0)."""

    prefixes: list[str]
    moves: list[dict[str, int | None]]
    completes: list[dict[str, str]]
    other: Expr


def _automaton(triggers: list[str]) -> _Automaton:
    prefixes = sorted({t[:i] for t in triggers for i in range(len(t))}, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(prefixes)}
    chars = sorted({c for t in triggers for c in t})
    moves: list[dict[str, int | None]] = []
    completes: list[dict[str, str]] = []
    for text in prefixes:
        move: dict[str, int | None] = {}
        complete: dict[str, str] = {}
        for char in chars:
            extended = text + char
            done = next((t for t in triggers if extended.endswith(t)), None)
            if done is not None:
                move[char], complete[char] = None, done
                continue
            suffix = next(extended[i:] for i in range(len(extended) + 1) if extended[i:] in index)
            move[char] = index[suffix]
        moves.append(move)
        completes.append(complete)
    other = char_class([(ord(c), ord(c)) for c in chars], negated=True)
    return _Automaton(prefixes, moves, completes, other)


def _free_text(triggers: list[str], rules: dict[str, Rule], untagged: bool, stop_after_first: bool) -> None:
    """Rules ``text_{tagged}_{state}``: free text in automaton ``state``, a tag where a trigger
    completes; ``tagged`` 0 (only with ``untagged``) until a tag was written, when the text may end."""
    automaton = _automaton(triggers)
    for tagged in (0, 1) if untagged else (1,):
        for state in range(len(automaton.prefixes)):
            options: list[Expr] = [EMPTY] if tagged else []
            for char, target in automaton.moves[state].items():
                if target is not None:
                    options.append(seq(literal(char), RuleRef(f"text_{tagged}_{target}")))
                    continue
                tag = RuleRef(_tag_rule(automaton.completes[state][char], triggers))
                options.append(seq(literal(char), tag, EMPTY if stop_after_first else RuleRef("text_1_0")))
            options.append(seq(automaton.other, RuleRef(f"text_{tagged}_0")))
            rules[f"text_{tagged}_{state}"] = Rule(f"text_{tagged}_{state}", choice(*options))


# -- the formats of vLLM and xgrammar --------------------------------------------------------------


def from_spec(spec: Any) -> tuple[list[Tag], list[str] | None, bool, bool]:
    """(tags, triggers, at_least_one, stop_after_first) of a structural-tag spec (a dict or JSON text)."""
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise GrammarError(f"the structural tag is not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise GrammarError(f"a structural tag is a JSON object, not {type(spec).__name__}")
    if "structures" in spec:
        structures = spec["structures"]
        if not isinstance(structures, list) or not structures:
            raise GrammarError("'structures' must be a non-empty list of {begin, schema, end}")
        tags = [Tag(_text(s, "begin"), s.get("schema", {}), _text(s, "end", "")) for s in structures]
        triggers = spec.get("triggers")
        if triggers is not None and (not isinstance(triggers, list) or not all(isinstance(t, str) for t in triggers)):
            raise GrammarError("'triggers' must be a list of strings")
        return tags, triggers, False, False
    form = spec.get("format", spec)
    if not isinstance(form, dict):
        raise GrammarError("a structural tag needs 'structures' or a 'format' object")
    if form.get("type") == "triggered_tags":
        tags = [Tag(_text(t, "begin"), _content(t.get("content")), _text(t, "end", "")) for t in form.get("tags", [])]
        return tags, form.get("triggers"), bool(form.get("at_least_one")), bool(form.get("stop_after_first"))
    if form.get("type") == "tag":
        tag = Tag(_text(form, "begin"), _content(form.get("content")), _text(form, "end", ""))
        return [tag], [tag.begin], True, True
    raise GrammarError(f"unsupported structural tag format {form.get('type')!r} (supported: 'structures', "
                       "'triggered_tags', 'tag')")


def _text(spec: dict[str, Any], key: str, default: str | None = None) -> str:
    value = spec.get(key, default)
    if not isinstance(value, str):
        raise GrammarError(f"a structural tag's {key!r} must be a string, got {value!r:.60}")
    return value


def _content(content: Any) -> Any:
    """A Tag's content from an xgrammar content format."""
    from codemask.grammar.grammar import Grammar

    if not isinstance(content, dict):
        raise GrammarError(f"a tag's content must be a format object, got {content!r:.60}")
    kind = content.get("type")
    if kind == "json_schema":
        return content.get("json_schema", {})
    if kind == "const_string":
        return Grammar(GrammarIR({"root": Rule("root", literal(_text(content, "value")))}, "root"), "ebnf")
    if kind == "any_text":
        return None
    if kind == "regex":
        return Grammar.from_regex(_text(content, "pattern"))
    if kind == "grammar":
        return Grammar.from_ebnf(_text(content, "grammar"))
    if kind == "sequence":
        raise GrammarError("structural tag content 'sequence' is not supported; use 'grammar' (EBNF) instead")
    raise GrammarError(f"unsupported structural tag content type {kind!r}")



def tool_call_tags(tools: Sequence[dict[str, Any]], *, begin: str = "<tool_call>\n", end: str = "\n</tool_call>"
                   ) -> list[Tag]:
    """One tag per OpenAI-style tool (``{"type": "function", "function": {"name", "parameters"}}``) in
    the Hermes format Qwen2.5's chat template teaches: ``<tool_call>`` then
    ``{"name": NAME, "arguments": ARGS}`` then ``</tool_call>``, ARGS valid under the tool's
    ``parameters`` (a JSON Schema)."""
    tags = []
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise GrammarError(f"a tool is {{'type': 'function', 'function': {{'name': ..., 'parameters': ...}}}}, "
                               f"got {tool!r:.80}")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        head = f'{begin}{{"name": {json.dumps(function["name"])}, "arguments": '
        tags.append(Tag(head, parameters, f"}}{end}"))
    return tags

"""The Lark front-end: a Lark grammar, resolved by Lark's own loader, as a lexer-mode IR.

Lark's grammar language has many conveniences (``%import``, templates, ``?rule``/``_rule``,
aliases, ``[x]``, ``%override``/``%extend``, terminals built from other terminals). Rather than
re-implement them, we let ``lark.load_grammar`` resolve everything and compile the grammar to what
Lark's own parsers see: BNF rules over terminal and non-terminal symbols, plus one
``TerminalDef`` (a string or a Python regex, with flags and a priority) per terminal. We then
translate that one-to-one, so that the engine matches exactly the language Lark's LALR parser
with its contextual lexer accepts (docs/lark-semantics.md is the normative description).

What the lexer needs besides each terminal's pattern and priority:

- ``Terminal.order``: the position in which Lark's lexer tries the terminal (priority, then
  longest possible match, then longest pattern text, then name); ``ir.terminals`` is in that
  order too.
- ``Terminal.unless``: for a regex terminal, the string terminals of the same priority whose
  text its regex matches exactly (Python's ``re.match``, as ``lark.lexer._create_unless``
  tests it), each with whether it is *embedded* (the string's flags are a subset of the
  regex's: then the string is only reachable by retyping where both are candidates).

Conventions of the produced IR (until the IR has fields for them):

- A terminal that is only ``%declare``d (produced by a post-lexer such as Lark's ``Indenter``,
  never by the text) has the body ``NOTHING`` and a name starting with :data:`DECLARED_PREFIX`;
  rules refer to it by that name. :func:`lark_name` recovers Lark's name.
- ``Terminal.literal`` is set for string terminals (``"if"``, ``"select"i``); a case-insensitive
  one has a regex body that differs from ``Literal(literal)``.
- A comment line ``//! codemask reserved: if else ...`` (a codemask extension Lark ignores)
  marks the string terminals with those texts ``Terminal.reserved``: reserved words, as a
  language's own tokenizer treats its hard keywords (docs/guides/code-completion.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from lark.exceptions import GrammarError as LarkGrammarError
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.grammar import Rule as LarkRule
from lark.lexer import PatternStr, TerminalDef
from lark.load_grammar import Grammar as LarkGrammar
from lark.load_grammar import load_grammar

from codemask.errors import CodemaskError, GrammarError, GrammarSyntaxError
from codemask.grammar.ir import (
    MAX_NESTING,
    NOTHING,
    Choice,
    Expr,
    GrammarIR,
    Literal,
    Rule,
    RuleRef,
    Sequence,
    Terminal,
    TerminalRef,
)

DECLARED_PREFIX = "declared:"
"""Prefix of the IR name of a terminal that is ``%declare``d but has no pattern."""

_FLAG_BITS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "u": re.UNICODE, "x": re.VERBOSE,
              "l": re.LOCALE}


def parse_lark(text: str, start: str = "start", source: str = "<lark>",
               import_paths: list[str] | None = None) -> GrammarIR:
    """Translate a Lark grammar into the IR (lexer mode), starting from rule ``start``.

    ``source`` names the grammar in error messages and anchors relative imports
    (``%import .other.X``) when it is a file path; ``import_paths`` are searched first for
    ``%import name.X``, before the grammar's folder and Lark's bundled grammars (``common``…).
    """
    grammar = _load(text, source, import_paths or [])
    try:
        terminal_defs, lark_rules, ignore = grammar.compile([start], set())
    except (LarkError, AssertionError) as exc:
        raise GrammarError(f"{source}: {_first_paragraph(exc)}") from exc
    if not any(rule.origin.name == start for rule in lark_rules):
        defined = sorted({str(name) for name, params, _tree, _opts in grammar.rule_defs if not params})
        raise GrammarError(f"{source}: start rule {start!r} is not defined (rules: {', '.join(defined) or 'none'})")
    defined_names = {td.name for td in terminal_defs}
    declared = sorted(_used_terminals(lark_rules) - defined_names)
    for td in terminal_defs:
        _check_lexable(td, source)
    terminals = _terminals(lexer_order(terminal_defs), source)
    for name in declared:
        terminals[DECLARED_PREFIX + name] = Terminal(DECLARED_PREFIX + name, NOTHING)
    missing_ignored = [name for name in ignore if name not in defined_names]
    if missing_ignored:
        raise GrammarError(f"{source}: %ignore names terminals without a pattern: {', '.join(missing_ignored)}")
    _mark_reserved(terminals, reserved_words(text))
    rename = {name: DECLARED_PREFIX + name for name in declared}
    return GrammarIR(rules=_rules(lark_rules, start, rename), start=start, terminals=terminals,
                     ignore=tuple(dict.fromkeys(ignore)))


_RESERVED_PRAGMA = re.compile(r"^//!\s*codemask\s+reserved:(.*)$", re.MULTILINE)


def reserved_words(text: str) -> set[str]:
    """The words listed on ``//! codemask reserved:`` lines of a grammar's text."""
    return {word for match in _RESERVED_PRAGMA.finditer(text) for word in match.group(1).split()}


def _mark_reserved(terminals: dict[str, Terminal], words: set[str]) -> None:
    """Flag the string terminals whose text is a reserved word (in place)."""
    import dataclasses

    for name, term in terminals.items():
        if term.literal is not None and term.literal.decode("utf-8") in words:
            terminals[name] = dataclasses.replace(term, reserved=True)


def lark_name(ir_name: str) -> str:
    """Lark's name of an IR terminal (strips :data:`DECLARED_PREFIX`)."""
    return ir_name.removeprefix(DECLARED_PREFIX)


def is_declared(terminal: Terminal) -> bool:
    """Whether ``terminal`` is a ``%declare``d terminal that no text can produce."""
    return terminal.name.startswith(DECLARED_PREFIX)


def lexer_order(terminal_defs: Iterable[TerminalDef]) -> list[TerminalDef]:
    """Terminals in the order Lark's lexer tries them (``lark.lexer.BasicLexer.__init__``).

    Higher priority first, then the larger maximal match width, then the longer pattern text,
    then the name. Lark joins them into one Python alternation in this order, so the first
    terminal whose regex matches wins, even when a later one would match more text.
    """
    return sorted(terminal_defs,
                  key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name))


def _check_nesting(text: str, source: str) -> None:
    """Refuse groups (``( )``, ``[ ]``) nested deeper than `MAX_NESTING` before Lark's loader,
    whose parser and tree transformers recurse per level, sees them; strings, regular expressions
    and comments are skipped."""
    depth = 0
    index = 0
    while index < len(text):
        char = text[index]
        if text.startswith("//", index):
            end = text.find("\n", index)
            index = len(text) if end < 0 else end
            continue
        if char in "\"/":  # a string or a regular expression: to its unescaped end on the line
            index += 1
            while index < len(text) and text[index] not in (char, "\n"):
                index += 2 if text[index] == "\\" else 1
        elif char in "([":
            depth += 1
            if depth > MAX_NESTING:
                raise GrammarSyntaxError(f"nesting deeper than {MAX_NESTING} groups", text, index, source)
        elif char in ")]":
            depth -= 1
        index += 1


def _load(text: str, source: str, import_paths: list[str]) -> LarkGrammar:
    """Lark's grammar loader, with its errors turned into codemask's."""
    _check_nesting(text, source)
    try:
        grammar, _used_files = load_grammar(text, source, import_paths, False)
    except LarkGrammarError as exc:
        context = exc.__context__
        if isinstance(context, UnexpectedInput) and _points_into(context, text):
            raise _syntax_error(context, _reason(exc, context), text, source) from exc
        raise GrammarError(f"{source}: {_first_paragraph(exc)}") from exc
    except UnexpectedInput as exc:  # Lark re-raises a parse error it has no friendlier message for
        if _points_into(exc, text):
            raise _syntax_error(exc, _reason(None, exc), text, source) from exc
        raise GrammarError(f"{source}: syntax error in an imported grammar: {_first_paragraph(exc)}") from exc
    except OSError as exc:  # %import of a grammar that is on no import path
        missing = getattr(exc, "filename", None) or str(exc)
        raise GrammarError(f"{source}: cannot find imported grammar {missing!r} (searched the import paths, "
                           "the grammar's folder and Lark's bundled grammars)") from exc
    except (LarkError, AssertionError) as exc:
        raise GrammarError(f"{source}: {_first_paragraph(exc)}") from exc
    return grammar


def _points_into(error: UnexpectedInput, text: str) -> bool:
    """Whether a grammar-syntax error is located in ``text`` (and not in an imported file).

    Lark parses ``text + "\\n"``; an error found while loading an imported grammar carries that
    file's positions, which we recognise because the offending text is not at that position here.
    """
    full = text + "\n"
    pos = _error_offset(error, full)
    if pos is None:
        return False
    if isinstance(error, UnexpectedCharacters):
        return full[pos:pos + 1] == error.char
    if isinstance(error, UnexpectedToken):
        value = str(error.token)
        return full[pos:pos + len(value)] == value
    return False


def _error_offset(error: UnexpectedInput, full: str) -> int | None:
    pos = getattr(error, "pos_in_stream", None)
    if isinstance(pos, int) and 0 <= pos <= len(full):
        return pos
    line, column = getattr(error, "line", None), getattr(error, "column", None)
    if not isinstance(line, int) or not isinstance(column, int) or line < 1:
        return None
    lines = full.split("\n")
    if line > len(lines):
        return None
    return sum(len(row) + 1 for row in lines[:line - 1]) + column - 1


def _reason(wrapper: LarkGrammarError | None, error: UnexpectedInput) -> str:
    """A one-line reason: Lark's own explanation ("Unclosed parenthesis", …) where it has one."""
    if wrapper is not None:
        message = str(wrapper)
        head = message.split(", at line", 1)[0]
        if head != message and not head.startswith("Unexpected input"):
            return head
    if isinstance(error, UnexpectedCharacters):
        return f"unexpected character {error.char!r}"
    if isinstance(error, UnexpectedToken):
        expected = ", ".join(sorted(error.expected)) if error.expected else "nothing"
        return f"unexpected {error.token.type} {str(error.token)!r} (expected one of: {expected})"
    return _first_paragraph(error)


def _syntax_error(error: UnexpectedInput, reason: str, text: str, source: str) -> GrammarSyntaxError:
    offset = _error_offset(error, text + "\n") or 0
    return GrammarSyntaxError(reason, text, min(offset, len(text)), source)


def _first_paragraph(exc: BaseException) -> str:
    return str(exc).strip().split("\n\n", 1)[0] or type(exc).__name__


def _used_terminals(rules: list[LarkRule]) -> set[str]:
    return {str(sym.name) for rule in rules for sym in rule.expansion if sym.is_term}


def _check_lexable(td: TerminalDef, source: str) -> None:
    """Refuse what Lark's lexer refuses (``BasicLexer.__init__``): bad regexes, empty matches."""
    try:
        re.compile(td.pattern.to_regexp())
    except re.error as exc:
        raise GrammarError(f"{source}: terminal {td.name}: invalid regular expression "
                           f"{td.pattern.to_regexp()!r}: {exc}") from exc
    if td.pattern.min_width == 0:
        raise GrammarError(f"{source}: terminal {td.name} can match the empty string "
                           f"({td.pattern.to_regexp()!r}); Lark's lexer does not allow zero-width terminals")


def _terminals(terminal_defs: list[TerminalDef], source: str) -> dict[str, Terminal]:
    """IR terminals, in lexer order; every terminal the regex front-end refuses is named in one error."""
    terminals: dict[str, Terminal] = {}
    refused: list[str] = []
    for order, td in enumerate(terminal_defs):
        try:
            _refuse_anchors(td)
            terminals[td.name] = _terminal(td, order, _unless(td, terminal_defs))
        except (CodemaskError, ValueError) as exc:
            reason = f"{exc.reason} (column {exc.column})" if isinstance(exc, GrammarSyntaxError) else str(exc)
            shown = f"/{td.pattern.value}/{''.join(sorted(td.pattern.flags))}"
            refused.append(f"terminal {td.name} {shown}: {reason}")
    if refused:
        raise GrammarError(f"{source}: {len(refused)} terminal(s) cannot be used (codemask matches Python regexes "
                           "without lookaround, backreferences or anchors):\n  " + "\n  ".join(refused))
    return terminals


# Lookaround regexes of widely shared terminals, with a lookaround-free regex that Python's
# leftmost-first match makes equivalent (same matches at every position).
LOOKAROUND_IDIOMS = {
    # lark's common.ESCAPED_STRING: a quote, the shortest run of non-newlines, and a closing quote
    # preceded by an even number of backslashes, i.e. a string whose backslashes escape one character
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
}


def _regex_nodes(regexp: str) -> Iterator[tuple[object, object]]:
    """Every ``(op, argument)`` node of a Python regex, as ``re``'s own parser reads it."""
    import re._constants as sre
    import re._parser as sre_parse

    stack = list(sre_parse.parse(regexp).data)
    while stack:
        op, arg = stack.pop()
        yield op, arg
        if op is sre.BRANCH:
            for branch in arg[1]:
                stack.extend(branch)
        elif op is sre.SUBPATTERN:
            stack.extend(arg[3])
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            stack.extend(arg[2])
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            stack.extend(arg[1])
        elif op is sre.ATOMIC_GROUP:
            stack.extend(arg)


def _refuse_anchors(td: TerminalDef) -> None:
    """Refuse ``^``, ``$``, ``\\A``, ``\\Z``, ``\\b``, ``\\B`` in a terminal.

    Lark matches a terminal inside the whole text, so an anchor looks at the neighbouring tokens
    or the end of the input (docs/lark-semantics.md §2.3), which a terminal's expression cannot
    say; the regex front-end reads them under ``fullmatch``, where they hold at the edges.
    """
    import re._constants as sre

    for op, arg in _regex_nodes(td.pattern.to_regexp()):
        if op is sre.AT:
            raise GrammarError(f"anchor {str(arg).removeprefix('AT_').lower()} depends on the text around the "
                               "token in Lark's lexer")


def _is_lazy(regexp: str) -> bool:
    """Whether a regex has a lazy quantifier: its match then stops at the first place it can.

    That is exact for the shapes lazy terminals have in practice (``/\\*(.|\\n)*?\\*/``,
    ``".*?"``): a lazy repeat followed by a fixed closing text.
    """
    import re._constants as sre

    return any(op is sre.MIN_REPEAT for op, _ in _regex_nodes(regexp))


def _terminal(td: TerminalDef, order: int, unless: tuple[tuple[str, bool], ...]) -> Terminal:
    from codemask.grammar.regex import regex_to_expr

    pattern = td.pattern
    flags = 0
    for letter in sorted(pattern.flags):
        flags |= _FLAG_BITS[letter]
    if isinstance(pattern, PatternStr):
        literal = pattern.value.encode("utf-8")
        body = Literal(literal) if not flags else regex_to_expr(re.escape(pattern.value), flags)
        return Terminal(td.name, body, td.priority, literal, order=order)
    regexp = LOOKAROUND_IDIOMS.get(pattern.value, pattern.value)
    return Terminal(td.name, regex_to_expr(regexp, flags), td.priority, order=order, unless=unless,
                    shortest=_is_lazy(regexp))


def _unless(regex_td: TerminalDef, terminal_defs: list[TerminalDef]) -> tuple[tuple[str, bool], ...]:
    """The keyword strings a regex terminal retypes to (``lark.lexer._create_unless``), in lexer order.

    A string terminal qualifies when it has the same priority and the regex, matched at the
    start of the string alone, matches exactly all of it — Python's leftmost-first match, with
    lookarounds seeing the end of that string, so this is computed with ``re`` itself.
    """
    if isinstance(regex_td.pattern, PatternStr):
        return ()
    regex = re.compile(regex_td.pattern.to_regexp())
    found = []
    for td in terminal_defs:
        if isinstance(td.pattern, PatternStr) and td.priority == regex_td.priority:
            match = regex.match(td.pattern.value)
            if match is not None and match.group(0) == td.pattern.value:
                found.append((td.name, set(td.pattern.flags) <= set(regex_td.pattern.flags)))
    return tuple(found)


def _rules(lark_rules: list[LarkRule], start: str, rename: dict[str, str]) -> dict[str, Rule]:
    """One IR rule per Lark non-terminal: a choice of its expansions, in Lark's order."""
    expansions: dict[str, list[Expr]] = {start: []}
    for rule in lark_rules:
        items = tuple(
            TerminalRef(rename.get(str(sym.name), str(sym.name))) if sym.is_term else RuleRef(str(sym.name))
            for sym in rule.expansion
        )
        expansions.setdefault(str(rule.origin.name), []).append(Sequence(items))
    return {name: Rule(name, Choice(tuple(alts))) for name, alts in expansions.items()}

"""The EBNF front-end: GBNF as llama.cpp writes it, and XGrammar's EBNF dialect.

One parser reads both, because they differ only in details that never conflict:

- ``name ::= body``; names are letters, digits, ``-`` and ``_``. A rule ends where the next
  ``name ::=`` begins, so bodies may span lines freely (llama.cpp ends a rule at a newline outside
  parentheses unless it follows ``|``; every grammar it accepts means the same here). A rule
  definition must start its line, as XGrammar requires, so that ``a ::= x b ::= y`` is an error
  rather than a surprise.
- String literals ``"..."`` and character classes ``[...]``/``[^...]`` over Unicode code points,
  with the escapes of both tools: ``\\n \\t \\r \\\\ \\" \\' \\? \\a \\b \\f \\v \\0 \\e \\[ \\] \\-``,
  ``\\xHH`` (exactly two digits, as llama.cpp reads it: the code point U+00HH), ``\\uHHHH`` and
  ``\\UHHHHHHHH``; inside classes also XGrammar's escaped regex punctuation (``\\^ \\$ \\. \\* \\+ \\?
  \\( \\) \\{ \\} \\| \\/``). ``.`` is any code point (llama.cpp's meaning; XGrammar would read a
  dotted name, which GBNF cannot have).
- Grouping, ``|``, ``*``, ``+``, ``?``, ``{m}``, ``{m,}``, ``{m,n}``, ``{,n}``, ``#`` comments. Empty
  alternatives (``ws ::= | " "``) and ``""`` both mean the empty string; a rule whose body is
  empty altogether is refused, since it is always a slip.
- XGrammar's lookahead assertion ``rule ::= body (= lookahead)``, kept as :attr:`Rule.lookahead`.

Not supported, each with an error that says so: llama.cpp's token references (``<[id]>``,
``<think>``, ``!<...>``) and XGrammar's macros (``TagDispatch(...)`` and friends parse as a rule
reference followed by a group, and fail as an undefined rule).

The IR is built with the normalising helpers of :mod:`codemask.grammar.ir`; ``{m,n}`` stays one
:class:`Repeat` node (never ``n`` copies): the engine counts repetitions in its state.
"""

from __future__ import annotations

from dataclasses import dataclass

from codemask.errors import GrammarError, GrammarSyntaxError
from codemask.grammar.ir import (
    EMPTY,
    MAX_CODE_POINT,
    MAX_NESTING,
    MAX_REPEAT,
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

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_SPACE = frozenset(" \t\r\n")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {
    "n": 0x0A, "t": 0x09, "r": 0x0D, "\\": 0x5C, '"': 0x22, "'": 0x27, "?": 0x3F, "a": 0x07,
    "b": 0x08, "f": 0x0C, "v": 0x0B, "0": 0x00, "e": 0x1B, "[": 0x5B, "]": 0x5D, "-": 0x2D,
}
_CLASS_ONLY_ESCAPES = {c: ord(c) for c in "^$.*+?(){}|/"}
_HEX_ESCAPE_WIDTH = {"x": 2, "u": 4, "U": 8}
_SURROGATES = range(0xD800, 0xE000)


def parse_ebnf(text: str, start: str = "root", source: str = "<ebnf>") -> GrammarIR:
    """Parse GBNF/XGrammar EBNF ``text`` into the grammar IR, starting at rule ``start``.

    Raises :class:`GrammarSyntaxError` (with line, column and the offending line) for text that
    does not parse, for a reference to an undefined rule (at the reference) and for a rule
    defined twice (at the second definition); :class:`GrammarError` when ``start`` is not defined.
    """
    rules = _Parser(text, source).parse()
    if start not in rules:
        defined = ", ".join(rules) or "none"
        raise GrammarError(f"{source}: start rule {start!r} is not defined (rules: {defined})")
    return GrammarIR(rules=rules, start=start)


@dataclass(frozen=True)
class _Reference:
    name: str
    offset: int
    rule: str


class _Parser:
    """Recursive descent over the text; ``pos`` is an offset into it, errors point at offsets."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.pos = 0
        self.rule_name = ""
        self.references: list[_Reference] = []
        self.depth = 0  # groups open at `pos` (`MAX_NESTING`)

    # -- entry point ------------------------------------------------------------------------

    def parse(self) -> dict[str, Rule]:
        rules: dict[str, Rule] = {}
        defined_at: dict[str, int] = {}
        self._skip_space()
        while self.pos < len(self.text):
            offset = self.pos
            rule = self._rule()
            if rule.name in defined_at:
                first_line = self.text.count("\n", 0, defined_at[rule.name]) + 1
                raise self._error(f"rule {rule.name!r} is defined twice (first on line {first_line})", offset)
            defined_at[rule.name] = offset
            rules[rule.name] = rule
            self._skip_space()
        for ref in self.references:
            if ref.name not in rules:
                raise self._error(f"undefined rule {ref.name!r} (referenced in rule {ref.rule!r})", ref.offset)
        return rules

    # -- rules ------------------------------------------------------------------------------

    def _rule(self) -> Rule:
        name = self._name()
        if name is None:
            raise self._error(f"expected a rule name, found {self._describe(self.pos)}", self.pos)
        self._skip_space()
        if not self.text.startswith("::=", self.pos):
            raise self._error(f"expected '::=' after rule name {name!r}, found {self._describe(self.pos)}", self.pos)
        self.pos += 3
        self.rule_name = name
        assign_end = self.pos
        self._skip_space()
        body_at = self.pos
        body = self._alternatives(nested=False)
        if self.pos == body_at:
            raise self._error(f"rule {name!r} has an empty body (write \"\" for the empty string)", assign_end)
        lookahead = None
        if self.text.startswith("(=", self.pos):
            lookahead = self._lookahead()
        self._skip_space()
        if self.pos < len(self.text) and not self._at_rule_definition():
            char = self.text[self.pos]
            if char == ")":
                raise self._error("unmatched ')'", self.pos)
            raise self._error(f"unexpected {self._describe(self.pos)} in rule {name!r}", self.pos)
        return Rule(name, body, lookahead)

    def _lookahead(self) -> Expr:
        open_at = self.pos
        self.pos += 2
        self._skip_space()
        inner_at = self.pos
        self._enter(open_at)
        body = self._alternatives(nested=True)
        self.depth -= 1
        self._skip_space()
        if self.pos >= len(self.text) or self.text[self.pos] != ")":
            raise self._error("unclosed lookahead assertion '(='", open_at)
        if self.pos == inner_at:
            raise self._error("empty lookahead assertion", open_at)
        self.pos += 1
        return body

    # -- expressions ------------------------------------------------------------------------

    def _alternatives(self, nested: bool) -> Expr:
        alternatives = [self._sequence(nested)]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            alternatives.append(self._sequence(nested))
        return choice(*alternatives)

    def _sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while True:
            self._skip_space()
            if self.pos >= len(self.text):
                break
            char = self.text[self.pos]
            if char in "|)":
                break
            if self.text.startswith("(=", self.pos):
                if nested:
                    raise self._error("a lookahead assertion '(= ...)' may only end a rule", self.pos)
                break
            if char in _NAME_CHARS:
                if self._at_rule_definition():
                    break
                items.append(self._reference())
            elif char in "*+?{":
                if not items:
                    raise self._error(f"'{char}' has nothing to repeat", self.pos)
                items[-1] = self._quantifier(items[-1])
            else:
                items.append(self._primary())
        return seq(*items)

    def _primary(self) -> Expr:
        char = self.text[self.pos]
        if char == '"':
            return self._string()
        if char == "[":
            return self._char_class()
        if char == ".":
            self.pos += 1
            return char_class([(0, MAX_CODE_POINT)])
        if char == "(":
            return self._group()
        if char in "<!":
            raise self._error("token references (<[id]>, <token>, !<...>) are not supported; "
                              "write the text the token stands for", self.pos)
        raise self._error(f"unexpected {self._describe(self.pos)}", self.pos)

    def _group(self) -> Expr:
        open_at = self.pos
        self.pos += 1
        self._enter(open_at)
        body = self._alternatives(nested=True)
        self.depth -= 1
        self._skip_space()
        if self.pos >= len(self.text) or self.text[self.pos] != ")":
            raise self._error("unclosed '('", open_at)
        self.pos += 1
        return body

    def _enter(self, open_at: int) -> None:
        """One group deeper, within `MAX_NESTING` (the parser and later stages recurse per level)."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self._error(f"nesting deeper than {MAX_NESTING} groups", open_at)

    def _reference(self) -> Expr:
        offset = self.pos
        name = self._name()
        assert name is not None
        self.references.append(_Reference(name, offset, self.rule_name))
        return RuleRef(name)

    def _quantifier(self, item: Expr) -> Expr:
        char = self.text[self.pos]
        if char == "{":
            low, high = self._bounds()
        else:
            self.pos += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        return Repeat(item, low, high)

    def _bounds(self) -> tuple[int, int | None]:
        """``{m}``, ``{m,}``, ``{m,n}`` or ``{,n}`` at ``pos``."""
        open_at = self.pos
        self.pos += 1
        self._skip_space()
        low = self._integer()
        self._skip_space()
        if self._take("}"):
            if low is None:
                raise self._error("expected a repetition count in '{...}'", open_at)
            return low, low
        if not self._take(","):
            raise self._error(f"expected ',' or '}}' in repetition, found {self._describe(self.pos)}", self.pos)
        self._skip_space()
        high = self._integer()
        self._skip_space()
        if not self._take("}"):
            raise self._error(f"expected '}}' to close the repetition, found {self._describe(self.pos)}", self.pos)
        if low is None and high is None:
            raise self._error("'{,}' gives no repetition bounds", open_at)
        low = low or 0
        if high is not None and high < low:
            raise self._error(f"repetition bounds out of order: {{{low},{high}}} (minimum above maximum)", open_at)
        return low, high

    def _integer(self) -> int | None:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _DIGITS:
            self.pos += 1
        if self.pos == start:
            return None
        if self.pos - start > len(str(MAX_REPEAT)) or int(self.text[start:self.pos]) > MAX_REPEAT:
            raise self._error(f"repetition count {self.text[start:self.pos]} is too large (at most {MAX_REPEAT})",
                              start)
        return int(self.text[start:self.pos])

    # -- terminals --------------------------------------------------------------------------

    def _string(self) -> Expr:
        open_at = self.pos
        self.pos += 1
        chars: list[str] = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] in "\r\n":
                raise self._error("unterminated string literal (write a newline inside a string as \\n)", open_at)
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                break
            if char == "\\":
                escape_at = self.pos
                code = self._escape(in_class=False)
                if code in _SURROGATES:
                    raise self._error(f"U+{code:04X} is a surrogate: it has no UTF-8 encoding", escape_at)
                chars.append(chr(code))
            else:
                chars.append(char)
                self.pos += 1
        return literal("".join(chars)) if chars else EMPTY

    def _char_class(self) -> Expr:
        open_at = self.pos
        self.pos += 1
        negated = self._take("^")
        ranges: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] in "\r\n":
                raise self._error("unterminated character class", open_at)
            if self.text[self.pos] == "]":
                self.pos += 1
                break
            item_at = self.pos
            low = self._class_char()
            high = low
            if self.text.startswith("-", self.pos) and self.pos + 1 < len(self.text) and self.text[self.pos + 1] != "]":
                self.pos += 1
                if self.text[self.pos] in "\r\n":
                    raise self._error("unterminated character class", open_at)
                high = self._class_char()
                if high < low:
                    raise self._error(f"character range out of order: U+{low:04X} > U+{high:04X}", item_at)
            ranges.append((low, high))
        return char_class(ranges, negated)

    def _class_char(self) -> int:
        if self.text[self.pos] == "\\":
            return self._escape(in_class=True)
        self.pos += 1
        return ord(self.text[self.pos - 1])

    def _escape(self, in_class: bool) -> int:
        """The code point of the escape at ``pos`` (a backslash); advances past it."""
        start = self.pos
        if start + 1 >= len(self.text):
            raise self._error("unfinished escape at end of input", start)
        letter = self.text[start + 1]
        self.pos = start + 2
        if letter in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[letter]
        if in_class and letter in _CLASS_ONLY_ESCAPES:
            return _CLASS_ONLY_ESCAPES[letter]
        if letter in _HEX_ESCAPE_WIDTH:
            width = _HEX_ESCAPE_WIDTH[letter]
            digits = self.text[self.pos:self.pos + width]
            if len(digits) != width or not set(digits) <= _HEX:
                raise self._error(f"'\\{letter}' must be followed by exactly {width} hex digits", start)
            self.pos += width
            code = int(digits, 16)
            if code > MAX_CODE_POINT:
                raise self._error(f"'\\{letter}{digits}' is beyond the last code point U+10FFFF", start)
            return code
        if in_class and letter in "dDsSwW":
            raise self._error(f"'\\{letter}' is not supported in EBNF character classes; list the characters "
                              "(e.g. [0-9] for \\d)", start)
        raise self._error(f"unknown escape '\\{letter}'", start)

    # -- lexical helpers --------------------------------------------------------------------

    def _name(self) -> str | None:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _NAME_CHARS:
            self.pos += 1
        return self.text[start:self.pos] if self.pos > start else None

    def _at_rule_definition(self) -> bool:
        """Whether a ``name ::=`` starts at ``pos`` (the end of the current rule).

        A definition that does not start its line is an error here: it can only be a missing
        line break or a stray ``::=``.
        """
        end = self.pos
        while end < len(self.text) and self.text[end] in _NAME_CHARS:
            end += 1
        if end == self.pos:
            return False
        after = end
        while after < len(self.text) and self.text[after] in " \t":
            after += 1
        if not self.text.startswith("::=", after):
            return False
        line_start = self.text.rfind("\n", 0, self.pos) + 1
        if self.text[line_start:self.pos].strip(" \t"):
            raise self._error(f"the definition of rule {self.text[self.pos:end]!r} must start on a new line",
                              self.pos)
        return True

    def _skip_space(self) -> None:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in _SPACE:
                self.pos += 1
            elif char == "#":
                newline = text.find("\n", self.pos)
                self.pos = len(text) if newline < 0 else newline + 1
            else:
                break

    def _take(self, char: str) -> bool:
        if self.text.startswith(char, self.pos):
            self.pos += len(char)
            return True
        return False

    def _describe(self, offset: int) -> str:
        if offset >= len(self.text):
            return "end of input"
        return f"{self.text[offset]!r}"

    def _error(self, message: str, offset: int) -> GrammarSyntaxError:
        return GrammarSyntaxError(message, self.text, offset, self.source)

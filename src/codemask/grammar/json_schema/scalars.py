"""Numbers and strings: the rules for a schema's leaf values.

Numbers are exact ranges (inclusive or exclusive bounds), with ``multipleOf`` as a divisibility
automaton, an enumeration of the multiples in a small range, or a count of decimal digits
(:mod:`.numbers`); excluded values (``not: {const: 3}``) cut the range in pieces. Strings are length
bounds, ``pattern`` and ``format``, intersected in a product automaton when there are several
(:mod:`.regular`), and excluded words are the complement of a trie of their spellings. A pattern
Python cannot read, or that no grammar can match exactly, is reported and not enforced.

Object keys are strings too: :mod:`.objects` builds its keys with these rules.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from fractions import Fraction
from typing import Any

from codemask.errors import GrammarSyntaxError
from codemask.grammar.ir import EMPTY, NOTHING, Choice, Expr, Repeat, RuleRef, Sequence, choice, literal, seq
from codemask.grammar.json_schema import numbers, regular, strings
from codemask.grammar.json_schema.algebra import Conjunction
from codemask.grammar.json_schema.base import BuilderBase
from codemask.grammar.json_schema.constraints import Constraints
from codemask.grammar.json_schema.nodes import Node
from codemask.grammar.regex import UnsupportedRegexError

MAX_ENUMERATED_MULTIPLES = 256
MAX_MODULUS = 1000  # a divisibility automaton has one rule per remainder
MAX_INTERSECTED_LENGTH = 256  # length bounds kept in a product with patterns/formats
MEMO_WORD_LIMIT = 64  # the longest word whose trie complement's nodes are kept by their suffixes


class ScalarRules(BuilderBase):
    """The schema builder's rules for numbers and strings."""

    # -- numbers -----------------------------------------------------------------------------

    def _number(self, kind: str, c: Constraints, conj: Conjunction) -> Expr:
        if not conj:
            return numbers.number_range(None, True, None, True) if kind != "integer" else \
                numbers.integer_valued(numbers.integer_range(None, None))
        node = conj[0]
        modulus = _integer_modulus(c.multiple_of, integer=kind == "integer")
        if kind == "integer" or modulus is not None:
            return numbers.integer_valued(self._integer(c, modulus or 1, node))
        if kind == "fraction" and c.lo is None and c.hi is None and not c.multiple_of:
            return numbers.NON_INTEGER
        frac_digits = None
        if c.multiple_of:
            frac_digits = _fraction_digits(c.multiple_of)
            if frac_digits is None:
                node.document.unsupported("multipleOf", node.pointer, f"multipleOf {c.multiple_of[0]} on numbers")
        lo, lo_inc = c.lo if c.lo is not None else (None, True)
        hi, hi_inc = c.hi if c.hi is not None else (None, True)
        return numbers.number_range(lo, lo_inc, hi, hi_inc, frac_digits, non_integer=kind == "fraction")

    def _integer(self, c: Constraints, modulus: int, node: Node) -> Expr:
        lo = None if c.lo is None else _ceil_bound(*c.lo)
        hi = None if c.hi is None else _floor_bound(*c.hi)
        if modulus == 1:
            return numbers.integer_range(lo, hi)
        if modulus > MAX_MODULUS and not (lo is not None and hi is not None
                                          and (hi - lo) // modulus <= MAX_ENUMERATED_MULTIPLES):
            node.document.unsupported("multipleOf", node.pointer, f"a multiple of {modulus} (over {MAX_MODULUS})")
            return numbers.integer_range(lo, hi)
        if lo is not None and hi is not None and (hi - lo) // modulus <= MAX_ENUMERATED_MULTIPLES:
            return numbers.multiples_in_range(lo, hi, modulus)
        natural, helpers = numbers.divisible_rules(f"m{modulus}_", modulus)
        for name, body in helpers.items():
            self.rules.setdefault(name, body)
        alternatives = []
        if (lo is None or lo <= 0) and hi is None:
            alternatives.append(natural)
        if lo is None and (hi is None or hi >= 0):
            alternatives.append(seq(literal("-"), natural))
        if not alternatives or (lo is not None and lo > 0) or (hi is not None and hi < 0) or (
                lo is not None and hi is not None):
            node.document.unsupported("multipleOf", node.pointer, "multipleOf with a wide one-sided range")
            return numbers.integer_range(lo, hi)
        return choice(*alternatives)

    # -- strings -----------------------------------------------------------------------------

    def _string(self, c: Constraints, conj: Conjunction, excluded: list[Any]) -> Expr:
        if c.max_length is not None and c.min_length > c.max_length:
            return NOTHING  # e.g. minLength 1 beside not: {minLength: 1}
        contents: list[tuple[Expr | None, Node]] = [(pattern_content_at(p, where), where) for p, where in c.patterns]
        contents += [(strings.format_content(name), where) for name, where in c.formats]
        known = [(content, where) for content, where in contents if content is not None]
        if not known:
            if excluded:
                return self._string_excluding([v for v in excluded if isinstance(v, str)], c)
            return self._free_string(c.min_length, c.max_length)
        content, origin = known[0]
        if excluded:
            origin.document.unsupported("not", origin.pointer, "excluding particular strings with a pattern")
        single = len(known) == 1
        if single and (c.min_length or c.max_length is not None):
            bounded = strings.bounded_pattern(content, c.min_length, c.max_length)
            single = bounded is not None
            content = bounded if bounded is not None else content
        if single:
            return seq(strings.QUOTE, self._named("s", strings.content_to_json(content)), strings.QUOTE)
        return self._string_intersection([k for k, _ in known], c, origin)

    def _string_intersection(self, contents: list[Expr], c: Constraints, origin: Node) -> Expr:
        """Strings matching every pattern/format and the length bounds: a product automaton.

        The product copies the pattern once per length, so bounds above `MAX_INTERSECTED_LENGTH`
        are dropped here (a superset: never a false refusal).
        """
        low = min(c.min_length, MAX_INTERSECTED_LENGTH)
        high = c.max_length if c.max_length is None or c.max_length <= MAX_INTERSECTED_LENGTH else None
        if low != c.min_length or high != c.max_length:
            keyword = "minLength" if low != c.min_length else "maxLength"
            origin.document.unsupported(keyword, origin.pointer,
                                        f"a length bound above {MAX_INTERSECTED_LENGTH} beside a pattern or format")
        operands = (Repeat(strings.any_char(), low, high), *(strings.content_to_json(content) for content in contents))
        start = self._intersections.get(operands)
        try:
            if start is None:
                start = self._intersections[operands] = regular.combine(list(operands), all, f"r{len(self.rules)}_",
                                                                        self.rules)
        except regular.TooLarge:
            keyword = "pattern" if len(contents) > 1 else ("maxLength" if c.max_length is not None else "minLength")
            origin.document.unsupported(keyword, origin.pointer, "patterns, formats and lengths too large to intersect")
            return seq(strings.QUOTE, self._named("s", strings.content_to_json(contents[0])), strings.QUOTE)
        return seq(strings.QUOTE, start, strings.QUOTE)

    def _free_string(self, min_length: int, max_length: int | None) -> RuleRef:
        """Any string of the length bounds, quotes included, as a shared rule (`Rule.shared`).

        The opening quote belongs to the rule: the caller's position before it then allows only
        tokens that begin with a quote, and every position where most of the vocabulary may
        follow lies inside this rule, whose masks every grammar with the same bounds shares.
        """
        ref = self._named("str", strings.string_of_length(min_length, max_length))
        self.shared.add(ref.name)
        return ref

    def _string_excluding(self, words: list[str], c: Constraints) -> Expr:
        """Strings other than ``words`` (``not: {enum: [...]}``), with the length bounds."""
        if c.min_length or c.max_length is not None:
            return self._free_string(c.min_length, c.max_length)
        return self._spelled_other_than(sorted(set(words)))

    def _spelled_other_than(self, words: list[str]) -> Expr:
        """JSON strings that spell none of ``words`` as `strings.string_literal` does."""
        if not words:
            return self._free_string(0, None)
        rest = self._named("chars", Repeat(strings.any_char(), 0, None))
        beyond_ascii = self._named("xchars", seq(strings.escaped_or_beyond_ascii(), rest))
        below = self._key_tries.setdefault((rest, beyond_ascii), {})
        return seq(strings.QUOTE, _trie_complement(words, rest, beyond_ascii, below), strings.QUOTE)


def split_at(c: Constraints, excluded: list[Any]) -> list[Constraints]:
    """The number constraints as pieces of range that avoid the excluded values (``not: {const: 3}``)."""
    pieces = [c]
    for value in sorted({Fraction(repr(v)) if isinstance(v, float) else Fraction(v) for v in excluded}):
        out = []
        for piece in pieces:
            below = piece.hi is None or value < piece.hi[0] or (value == piece.hi[0] and piece.hi[1])
            above = piece.lo is None or value > piece.lo[0] or (value == piece.lo[0] and piece.lo[1])
            if below and above:
                out += [dataclasses.replace(piece, hi=(value, False)), dataclasses.replace(piece, lo=(value, False))]
            else:
                out.append(piece)
        pieces = out
    return pieces


def _integer_modulus(multiples: list[Fraction], integer: bool) -> int | None:
    """The integer every value must be a multiple of, when the multipleOf values imply integers."""
    if not multiples:
        return None
    if not integer and any(m.denominator != 1 for m in multiples):
        return None
    return functools.reduce(math.lcm, (m.numerator for m in multiples), 1)


def _fraction_digits(multiples: list[Fraction]) -> int | None:
    """k when every multipleOf is exactly 10**-k for one k (the common ``0.01``); else None."""
    digits = set()
    for m in multiples:
        k = round(math.log10(m.denominator)) if m.numerator == 1 else -1
        if k < 0 or Fraction(1, 10**k) != m:
            return None
        digits.add(k)
    return max(digits) if len(digits) == 1 else None


def _ceil_bound(value: Fraction, inclusive: bool) -> int:
    n = math.ceil(value)
    return n + 1 if n == value and not inclusive else n


def _floor_bound(value: Fraction, inclusive: bool) -> int:
    n = math.floor(value)
    return n - 1 if n == value and not inclusive else n


def pattern_content_at(pattern: str, node: Node) -> Expr | None:
    try:
        return strings.pattern_content(pattern)
    except UnsupportedRegexError as exc:
        node.document.unsupported("pattern", node.pointer, f"{pattern!r}: {exc.reason}")
    except (re.error, GrammarSyntaxError) as exc:
        node.document.unsupported("pattern", node.pointer, f"{pattern!r} is not a regex Python reads: {exc}")
    return None


def _trie_complement(words: list[str], any_rest: Expr, beyond_ascii: Expr,
                     below: dict[tuple[str, ...], Expr]) -> Expr:
    """JSON string contents that spell none of ``words`` as `strings.string_literal` spells them
    (printable ASCII raw, other characters in any spelling).

    ``any_rest`` matches any string content, and ``beyond_ascii`` an escaped or raw non-ASCII
    character followed by any content (shared rules: they follow every branch, and keeping
    the branches small keeps the rule's automaton small). ``below`` holds the complements already
    made below a node of some trie with these two rules, by the node's suffixes: an object's keys
    and another's share most of their branches (half the nodes of a large schema's key tries). The
    suffixes of a word are kept once per character, so words longer than `MEMO_WORD_LIMIT` (a
    ``not: {enum: [...]}`` of long strings) are complemented without keeping them.
    """
    distinct = tuple(sorted(set(words)))
    kept = below if max(map(len, distinct)) <= MEMO_WORD_LIMIT else None
    return _complement_below(distinct, any_rest, beyond_ascii, kept)


def _complement_below(suffixes: tuple[str, ...], any_rest: Expr, beyond_ascii: Expr,
                      below: dict[tuple[str, ...], Expr] | None) -> Expr:
    """`_trie_complement` below one node of the words' trie, given by the words' ``suffixes``
    there (sorted and distinct; ``""`` where a word ends). The branches are built as the IR's
    nodes directly: none is a choice and no two are equal (each begins with its own characters),
    which is what `choice` and `seq` would check."""
    found = below.get(suffixes) if below is not None else None
    if found is not None:
        return found
    children: dict[str, list[str]] = {}  # (in character order, each child's suffixes sorted)
    for suffix in suffixes:
        if suffix:
            children.setdefault(suffix[0], []).append(suffix[1:])
    next_chars = list(children)
    alternatives: list[Expr] = [] if suffixes[0] == "" else [EMPTY]
    if all(strings.spelled_raw_only(ch) for ch in next_chars):
        alternatives += [Sequence((strings.other_raw_ascii(next_chars), any_rest)), beyond_ascii]
    else:
        alternatives.append(seq(strings.other_char_spellings(next_chars), any_rest))
    for ch, child in children.items():
        spelled = strings.literal_char(ch)
        rest = _complement_below(tuple(child), any_rest, beyond_ascii, below)  # (a choice: two branches at least)
        alternatives.append(Sequence((spelled, rest)) if type(spelled) is not Sequence else seq(spelled, rest))
    found = Choice(tuple(alternatives))
    if below is not None:
        below[suffixes] = found
    return found

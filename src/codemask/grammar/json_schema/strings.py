"""JSON strings as grammars: characters with their escapes, lengths, patterns and formats.

A JSON Schema string constraint talks about the *decoded* string, but the model writes the JSON
spelling, where any character may appear escaped (``\\u00e9`` for ``é``; ``\\"``, ``\\n`` …) and
some must be. So every constraint over characters is compiled through :func:`json_char`, which
turns a set of code points into "one JSON string character whose decoded value is in the set" —
raw, short escape or ``\\uXXXX`` (surrogate pairs for astral code points). That keeps patterns,
formats, enums and property names exact whatever spelling an instance uses.

Over-approximations (documented, never refusing a valid instance): a character class with very
many ranges accepts any ``\\uXXXX`` escape rather than spelling each range, and any class that
reaches the astral planes accepts any surrogate-pair escape.
"""

from __future__ import annotations

import functools

from codemask.grammar.ir import (
    MAX_CODE_POINT,
    NOTHING,
    CharClass,
    Choice,
    Expr,
    Literal,
    Repeat,
    Sequence,
    char_class,
    choice,
    complement_ranges,
    literal,
    normalize_ranges,
    seq,
)
from codemask.grammar.json_schema.numbers import digit_class, fixed_width_range
from codemask.grammar.regex import regex_to_expr

Ranges = tuple[tuple[int, int], ...]

_RAW_FORBIDDEN: Ranges = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_SURROGATES: Ranges = ((0xD800, 0xDFFF),)
_SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_MAX_SPELLED_RANGES = 24
QUOTE = literal('"')

_YEAR = r"(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = r"([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
_FULL_DATE = (rf"({_YEAR}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|{_YEAR}-(0[469]|11)-(0[1-9]|[12][0-9]|30)"
              rf"|{_YEAR}-02-(0[1-9]|1[0-9]|2[0-8])|{_LEAP_YEAR}-02-29)")
"""RFC 3339's full-date with the calendar's month lengths: February 29th only in leap years
(divisible by 4, centuries only by 400), and years 0001-9999 as Python's ``date`` reads them."""

FORMATS: dict[str, str] = {
    "date": _FULL_DATE,
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "date-time": _FULL_DATE + r"[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:"
                 r"([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "duration": r"P(([0-9]+Y([0-9]+M([0-9]+D)?)?|[0-9]+M([0-9]+D)?|[0-9]+D)(T([0-9]+H([0-9]+M([0-9]+S)?)?|"
                r"[0-9]+M([0-9]+S)?|[0-9]+S))?|T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)|[0-9]+W)",
    "email": r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*",
    "idn-email": r"[^\s@]+@[^\s@]+",
    "hostname": r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?",
    "idn-hostname": r"[^\s.]+(\.[^\s.]+)*\.?",
    "ipv4": r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}",
    "ipv6": r"(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}"
            r":[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}"
            r"(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:)"
            r"{1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}|:((:[0-9a-fA-F]{1,4})"
            r"{1,7}|:)|([0-9a-fA-F]{1,4}:){6}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|"
            r"2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}|::([fF]{4}(:0{1,4})?:)?(25[0-5]|2[0-4][0-9]|"
            r"1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3})",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\"<>\\^`{|}]*",
    "uri-reference": r"[^\s\"<>\\^`{|}]*",
    "iri": r"[A-Za-z][A-Za-z0-9+.-]*:[^\s]*",
    "iri-reference": r"[^\s]*",
    "uri-template": r"[^\s\"<>\\^`|]*",
    "json-pointer": r"(/([^~/]|~[01])*)*",
    "relative-json-pointer": r"(0|[1-9][0-9]*)(#|(/([^~/]|~[01])*)*)",
}
"""The string formats codemask enforces, as ``re.fullmatch`` patterns over the decoded string.

Other formats (``regex``, custom ones) are annotations: any string is accepted.
"""


@functools.lru_cache(maxsize=65536)
def json_char(ranges: Ranges) -> Expr:
    """One JSON string character (raw or escaped) whose decoded code point is in ``ranges``."""
    ranges = _subtract(normalize_ranges(ranges), _SURROGATES)
    if not ranges:
        return NOTHING
    raw = _subtract(ranges, _RAW_FORBIDDEN)
    alternatives: list[Expr] = [char_class(raw)] if raw else []
    alternatives += [literal("\\" + letter) for cp, letter in _SHORT_ESCAPES.items() if _contains(ranges, cp)]
    alternatives.append(_unicode_escapes(ranges))
    return choice(*alternatives)


def _unicode_escapes(ranges: Ranges) -> Expr:
    """``\\uXXXX`` (and surrogate pairs) spelling the code points of ``ranges``."""
    bmp = tuple((lo, min(hi, 0xFFFF)) for lo, hi in ranges if lo <= 0xFFFF)
    escapes: list[Expr] = []
    if len(bmp) > _MAX_SPELLED_RANGES:
        escapes.append(seq(literal("\\u"), Repeat(digit_class(0, 15, 16), 4, 4)))
    elif bmp:
        escapes.append(seq(literal("\\u"), choice(*(fixed_width_range(lo, hi, 4, 16) for lo, hi in bmp))))
    if ranges[-1][1] > 0xFFFF:
        high = fixed_width_range(0xD800, 0xDBFF, 4, 16)
        low = fixed_width_range(0xDC00, 0xDFFF, 4, 16)
        escapes.append(seq(literal("\\u"), high, literal("\\u"), low))
    return choice(*escapes)


def _contains(ranges: Ranges, cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def _subtract(ranges: Ranges, removed: Ranges) -> Ranges:
    keep = complement_ranges(normalize_ranges(removed))
    out = [(max(lo, klo), min(hi, khi)) for lo, hi in ranges for klo, khi in keep if max(lo, klo) <= min(hi, khi)]
    return normalize_ranges(out)


@functools.lru_cache(maxsize=4096)
def spelled_raw_only(c: str) -> bool:
    """Whether `literal_char` spells ``c`` raw only (printable ASCII other than quote and backslash)."""
    return 0x20 <= ord(c) < 0x7F and c not in '"\\'


def other_char_spellings(next_chars: list[str]) -> Expr:
    """Every spelling of a string character that `literal_char` does not give one of ``next_chars``.

    Used for keys an object does not name: a key branches off a known key exactly where its
    spelling leaves every known one. The escaped spellings of raw-only characters (``\\u0061``
    for ``a``) are not the known key's spelling, so they belong here.
    """
    others = json_char(complement_ranges(normalize_ranges([(ord(c), ord(c)) for c in next_chars])))
    return choice(others, *(_escaped_spellings(c) for c in next_chars if spelled_raw_only(c)))


def other_raw_ascii(next_chars: list[str]) -> Expr:
    """Raw ASCII from the space up, DEL included, other than the raw-only ``next_chars``: with
    `escaped_or_beyond_ascii`, the same set as `other_char_spellings` (split so the second part can
    be one shared rule)."""
    assert all(spelled_raw_only(c) for c in next_chars)
    return _other_raw_ascii("".join(sorted(set(next_chars))))


@functools.lru_cache(maxsize=4096)
def _other_raw_ascii(taken: str) -> Expr:
    """`other_raw_ascii` of the (sorted, distinct) characters ``taken``: the same few sets come
    back at every branch of every object's key trie."""
    raw = _subtract(((0x20, 0x7F),), tuple((ord(c), ord(c)) for c in taken) + _RAW_FORBIDDEN)
    return char_class(raw) if raw else NOTHING


@functools.cache
def escaped_or_beyond_ascii() -> Expr:
    """Any escaped string character, or a raw one beyond ASCII (cached: every object's key trie
    ends its branches with it)."""
    short = [literal("\\" + letter) for letter in _SHORT_ESCAPES.values()]
    return choice(char_class(_subtract(((0x80, MAX_CODE_POINT),), _SURROGATES)), *short,
                  _unicode_escapes(_subtract(((0, MAX_CODE_POINT),), _SURROGATES)))


def _escaped_spellings(c: str) -> Expr:
    code = ord(c)
    forms: list[Expr] = [seq(literal("\\u"), fixed_width_range(code, code, 4, 16))]
    if code in _SHORT_ESCAPES:
        forms.append(literal("\\" + _SHORT_ESCAPES[code]))
    return choice(*forms)


@functools.cache
def any_char() -> Expr:
    """Any JSON string character."""
    return json_char(((0, MAX_CODE_POINT),))


def string_content(text: str) -> Expr:
    """The inside of :func:`string_literal` (no quotes)."""
    if text and text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return literal(text)  # (every character spelled raw: what the characters' sequence fuses to)
    return seq(*(literal_char(c) for c in text))


def string_literal(text: str) -> Expr:
    """The JSON string whose decoded value is ``text``.

    Printable ASCII is spelled raw (escaping ``a`` as ``\\u0061`` is legal but no serialiser or
    model does it, and allowing it for every character of every key multiplies the automata);
    other characters in any spelling, so ``ensure_ascii`` output (``\\u00e9``) is accepted.
    """
    return seq(QUOTE, string_content(text), QUOTE)


@functools.lru_cache(maxsize=4096)
def literal_char(c: str) -> Expr:
    """One decoded character as `string_literal` spells it (cached: keys and enums repeat them)."""
    code = ord(c)
    if 0x20 <= code < 0x7F and c not in '"\\':
        return literal(c)
    return json_char(((code, code),))


def string_of_length(min_length: int, max_length: int | None) -> Expr:
    """Any JSON string of ``min_length`` to ``max_length`` characters."""
    return seq(QUOTE, Repeat(any_char(), min_length, max_length), QUOTE)


def content_to_json(expr: Expr) -> Expr:
    """Map an expression over decoded characters to one over their JSON string spelling."""
    if isinstance(expr, Literal):
        text = expr.value.decode("utf-8")
        return seq(*(json_char(((ord(c), ord(c)),)) for c in text))
    if isinstance(expr, CharClass):
        ranges = complement_ranges(expr.ranges) if expr.negated else expr.ranges
        return json_char(ranges)
    if isinstance(expr, Sequence):
        return seq(*(content_to_json(item) for item in expr.items))
    if isinstance(expr, Choice):
        return choice(*(content_to_json(alt) for alt in expr.alternatives))
    if isinstance(expr, Repeat):
        return Repeat(content_to_json(expr.item), expr.min, expr.max)
    raise TypeError(f"unexpected expression in a string pattern: {expr!r}")


def pattern_content(pattern: str) -> Expr:
    """Decoded strings in which the JSON Schema ``pattern`` finds a match (``re.search``).

    JSON Schema regexes are ECMA-262; Python's ``re`` reads the common subset the same way.
    """
    return regex_to_expr(ecma_to_python(pattern), search=True)


def format_content(name: str) -> Expr | None:
    """Decoded strings of a known ``format``; None for formats that are annotations only."""
    pattern = FORMATS.get(name)
    return None if pattern is None else _format_expr(pattern)


@functools.cache
def _format_expr(pattern: str) -> Expr:
    return regex_to_expr(pattern)


def ecma_to_python(pattern: str) -> str:
    """Rewrite the ECMA-262 spellings Python reads differently: ``\\d``/``\\w`` are ASCII, ``$`` is the end."""
    out = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "dD":
                out.append(("0-9" if in_class else "[0-9]") if nxt == "d" else ("\\D" if in_class else "[^0-9]"))
            elif nxt in "wW" and not in_class:
                out.append("[A-Za-z0-9_]" if nxt == "w" else "[^A-Za-z0-9_]")
            elif nxt == "w":
                out.append("A-Za-z0-9_")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "$" and not in_class:
            out.append(r"\Z")  # ECMA's $ is the very end; Python's also allows a final newline
            i += 1
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def bounded_pattern(content: Expr, min_length: int, max_length: int | None) -> Expr | None:
    """``content`` restricted to lengths in [min, max], when its shape makes that exact; else None.

    Handles the shape patterns with lengths usually have: fixed-width pieces around one repeated
    single-character item (``^[a-z]+$``, ``^id-[0-9]*$``).
    """
    items = content.items if isinstance(content, Sequence) else (content,)
    fixed = 0
    repeat_at = None
    for index, item in enumerate(items):
        width = _fixed_width(item)
        if width is not None:
            fixed += width
        elif isinstance(item, Repeat) and _fixed_width(item.item) == 1 and repeat_at is None:
            repeat_at = index
        else:
            return None
    if repeat_at is None:
        inside = min_length <= fixed and (max_length is None or fixed <= max_length)
        return content if inside else NOTHING
    rep = items[repeat_at]
    assert isinstance(rep, Repeat)
    low = max(rep.min, min_length - fixed)
    high_options = [m for m in (rep.max, None if max_length is None else max_length - fixed) if m is not None]
    high = min(high_options) if high_options else None
    if high is not None and low > high:
        return NOTHING
    return seq(*items[:repeat_at], Repeat(rep.item, low, high), *items[repeat_at + 1:])


def _fixed_width(expr: Expr) -> int | None:
    """The number of characters every match of ``expr`` has, if fixed."""
    if isinstance(expr, Literal):
        return len(expr.value.decode("utf-8"))
    if isinstance(expr, CharClass):
        return 1
    if isinstance(expr, Sequence):
        widths = [_fixed_width(i) for i in expr.items]
        return None if None in widths else sum(w for w in widths if w is not None)
    if isinstance(expr, Choice):
        distinct = {_fixed_width(a) for a in expr.alternatives}
        return distinct.pop() if len(distinct) == 1 else None
    if isinstance(expr, Repeat) and expr.min == expr.max:
        width = _fixed_width(expr.item)
        return None if width is None else width * expr.min
    return None

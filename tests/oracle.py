r"""A slow, simple, independent recognizer for the grammar IR: the oracle for the engine's tests.

It shares nothing with the engine. The IR becomes a plain context-free grammar whose terminals
are single bytes (literals, byte classes) or single UTF-8 encoded code points (character
classes); an Earley recognizer then reads the input byte by byte:

- ``accepts(ir, data)``: ``data`` is a sentence of the grammar.
- ``is_viable_prefix(ir, data)``: some continuation of ``data`` is a sentence. Unproductive
  alternatives are pruned first, so every live Earley item can still be completed; ``data`` may
  end inside a UTF-8 character.
- ``sample(ir, rng, max_depth)``: a random sentence, for property tests.

Earley handles every context-free grammar (ambiguous, left-recursive, with empty rules), which
is the point: it is obviously correct rather than fast. Repetitions become small recursive rules
(left-recursive for unbounded ones, a chain of ``{m,n}`` counters for bounded ones).

Lookahead assertions (XGrammar's ``rule ::= body (= la)``), read as XGrammar uses them: a rule
completes at a position only if the rest of the input starts with a string of ``la``, or ends
before one is complete (the end of the input never contradicts a lookahead: XGrammar's own JSON
grammar puts ``(= [ \n\t,}\\]])`` after the closing brace of a top-level object). Each lookahead is
checked on its own, so with lookaheads ``is_viable_prefix`` may say yes where no continuation
satisfies them all together, and ``sample`` retries until a sample is accepted.

Lexer-mode grammars (Lark terminals) are out of scope: their oracle is Lark itself.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from codemask.grammar.ir import (
    MAX_CODE_POINT,
    ByteClass,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Literal,
    Repeat,
    RuleRef,
    Sequence,
    TerminalRef,
)

# A symbol is ("nt", id), ("byte", frozenset of byte values) or ("char", ranges, negated).
Symbol = tuple


# ------------------------------------------------------------------------------------------
# UTF-8, written out plainly
# ------------------------------------------------------------------------------------------

_LENGTH_LIMITS = {1: (0, 0x7F), 2: (0x80, 0x7FF), 3: (0x800, 0xFFFF), 4: (0x10000, MAX_CODE_POINT)}


def _utf8_length(lead: int) -> int | None:
    if lead < 0x80:
        return 1
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return None


def _decode(data: bytes, i: int) -> tuple[int, int] | str | None:
    """The code point at ``data[i:]`` and its length; "partial" if ``data`` ends inside a valid
    prefix of one; None if the bytes are not UTF-8."""
    n = _utf8_length(data[i])
    if n is None:
        return None
    tail = data[i + 1:i + n]
    if any(b & 0xC0 != 0x80 for b in tail):
        return None
    if len(tail) < n - 1:
        return "partial" if _prefix_code_points(data[i:]) is not None else None
    cp = data[i] & (0x7F >> n if n > 1 else 0x7F)
    for b in tail:
        cp = (cp << 6) | (b & 0x3F)
    lo, hi = _LENGTH_LIMITS[n]
    if not lo <= cp <= hi or 0xD800 <= cp <= 0xDFFF:
        return None
    return cp, n


def _prefix_code_points(prefix: bytes) -> tuple[int, int] | None:
    """The range of valid code points whose encoding starts with the incomplete ``prefix``."""
    n = _utf8_length(prefix[0])
    if n is None or len(prefix) >= n:
        return None
    lowest = prefix + bytes([0x80] * (n - len(prefix)))
    highest = prefix + bytes([0xBF] * (n - len(prefix)))

    def value(encoded: bytes) -> int:
        cp = encoded[0] & (0x7F >> n)
        for b in encoded[1:]:
            cp = (cp << 6) | (b & 0x3F)
        return cp

    lo, hi = max(value(lowest), _LENGTH_LIMITS[n][0]), min(value(highest), _LENGTH_LIMITS[n][1])
    if lo > hi or (lo >= 0xD800 and hi <= 0xDFFF):
        return None
    return lo, hi


def _in_class(cp: int, ranges: tuple[tuple[int, int], ...], negated: bool) -> bool:
    inside = any(lo <= cp <= hi for lo, hi in ranges)
    return inside != negated and not 0xD800 <= cp <= 0xDFFF and cp <= MAX_CODE_POINT


def _class_members(ranges: tuple[tuple[int, int], ...], negated: bool) -> list[tuple[int, int]]:
    """The class as explicit ranges of valid (non-surrogate) code points."""
    if negated:
        out, nxt = [], 0
        for lo, hi in sorted(ranges):
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = max(nxt, hi + 1)
        if nxt <= MAX_CODE_POINT:
            out.append((nxt, MAX_CODE_POINT))
        ranges = tuple(out)
    members = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)):
            if a <= b:
                members.append((a, b))
    return members


def _class_overlaps(ranges: tuple[tuple[int, int], ...], negated: bool, lo: int, hi: int) -> bool:
    return any(a <= hi and lo <= b for a, b in _class_members(ranges, negated))


# ------------------------------------------------------------------------------------------
# The IR as a plain context-free grammar
# ------------------------------------------------------------------------------------------

@dataclass
class _CFG:
    productions: list[list[tuple[Symbol, ...]]] = field(default_factory=list)
    lookahead: dict[int, int] = field(default_factory=dict)  # rule nonterminal -> lookahead nonterminal

    def new(self) -> int:
        self.productions.append([])
        return len(self.productions) - 1


class _Builder:
    def __init__(self, ir: GrammarIR) -> None:
        if ir.lexer_mode:
            raise ValueError("the oracle reads plain (non-lexer) grammars only")
        self.ir = ir
        self.cfg = _CFG()
        self.rule_nt = {name: self.cfg.new() for name in ir.rules}
        self.memo: dict[Expr, int] = {}
        for name, rule in ir.rules.items():
            self.cfg.productions[self.rule_nt[name]].append(self.symbols(rule.body))
            if rule.lookahead is not None:
                self.cfg.lookahead[self.rule_nt[name]] = self.wrap(rule.lookahead)

    def wrap(self, expr: Expr) -> int:
        nt = self.cfg.new()
        self.cfg.productions[nt].append(self.symbols(expr))
        return nt

    def symbols(self, expr: Expr) -> tuple[Symbol, ...]:
        if isinstance(expr, Literal):
            return tuple(("byte", frozenset([b])) for b in expr.value)
        if isinstance(expr, CharClass):
            return (("char", expr.ranges, expr.negated),)
        if isinstance(expr, ByteClass):
            return (("byte", frozenset(b for lo, hi in expr.ranges for b in range(lo, hi + 1))),)
        if isinstance(expr, RuleRef):
            if expr.name not in self.rule_nt:
                raise ValueError(f"undefined rule {expr.name!r}")
            return (("nt", self.rule_nt[expr.name]),)
        if isinstance(expr, Sequence):
            return tuple(s for item in expr.items for s in self.symbols(item))
        if isinstance(expr, TerminalRef):
            raise ValueError("terminal references belong to lexer-mode grammars")
        return (("nt", self.nonterminal(expr)),)

    def nonterminal(self, expr: Expr) -> int:
        if expr in self.memo:
            return self.memo[expr]
        nt = self.cfg.new()
        self.memo[expr] = nt
        if isinstance(expr, Choice):
            self.cfg.productions[nt] = [self.symbols(alt) for alt in expr.alternatives]
        elif isinstance(expr, Repeat):
            item = self.symbols(expr.item)
            if expr.max is None:
                star = self.cfg.new()  # star ::= "" | star item
                self.cfg.productions[star] = [(), (("nt", star), *item)]
                self.cfg.productions[nt] = [item * expr.min + (("nt", star),)]
            else:
                self.cfg.productions[nt] = [(("nt", self.bounded(item, expr.min, expr.max, {})),)]
        else:
            raise TypeError(f"not a grammar expression: {expr!r}")
        return nt

    def bounded(self, item: tuple[Symbol, ...], low: int, high: int, memo: dict[tuple[int, int], int]) -> int:
        """item{low,high} as ``R(l,h) ::= item R(l-1,h-1)`` (l > 0) or ``"" | item R(0,h-1)``."""
        if (low, high) in memo:
            return memo[low, high]
        nt = self.cfg.new()
        memo[low, high] = nt
        if low > 0:
            self.cfg.productions[nt] = [(*item, ("nt", self.bounded(item, low - 1, high - 1, memo)))]
        elif high > 0:
            self.cfg.productions[nt] = [(), (*item, ("nt", self.bounded(item, 0, high - 1, memo)))]
        else:
            self.cfg.productions[nt] = [()]
        return nt


def _terminal_nonempty(symbol: Symbol) -> bool:
    if symbol[0] == "byte":
        return bool(symbol[1])
    return bool(_class_members(symbol[1], symbol[2]))


def _prune(cfg: _CFG) -> set[int]:
    """Drop productions that derive no string; return the productive nonterminals."""
    productive: set[int] = set()
    changed = True
    while changed:
        changed = False
        for nt, prods in enumerate(cfg.productions):
            if nt not in productive and any(
                    all(s[1] in productive if s[0] == "nt" else _terminal_nonempty(s) for s in prod) for prod in prods):
                productive.add(nt)
                changed = True
    for nt, prods in enumerate(cfg.productions):
        cfg.productions[nt] = [p for p in prods
                               if all(s[1] in productive if s[0] == "nt" else _terminal_nonempty(s) for s in p)]
    return productive


# ------------------------------------------------------------------------------------------
# Earley
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Run:
    completed_at: frozenset[int]  # input lengths after which the start symbol is complete
    alive_at_end: bool            # the whole input is a proper prefix of some longer derivation


class _Recognizer:
    def __init__(self, ir: GrammarIR) -> None:
        builder = _Builder(ir)
        self.cfg = builder.cfg
        self.start = builder.rule_nt.get(ir.start)
        self.productive = _prune(self.cfg)
        self.ir = ir

    def accepts(self, data: bytes) -> bool:
        if self.start not in self.productive:
            return False
        return len(data) in self._run(self.start, data, 0, viable=False, memo={}).completed_at

    def is_viable_prefix(self, data: bytes) -> bool:
        if self.start not in self.productive:
            return False
        run = self._run(self.start, data, 0, viable=True, memo={})
        return run.alive_at_end or len(data) in run.completed_at

    def _lookahead_holds(self, nt: int, data: bytes, at: int, memo: dict) -> bool:
        """Whether the input after ``at`` starts with a string of ``nt``'s lookahead, or ends
        before one is complete."""
        key = (nt, at)
        if key not in memo:
            memo[key] = False  # a lookahead that needs itself at the same place does not hold
            run = self._run(self.cfg.lookahead[nt], data, at, True, memo)
            memo[key] = bool(run.completed_at) or run.alive_at_end
        return bool(memo[key])

    def _run(self, start: int, data: bytes, begin: int, viable: bool, memo: dict) -> _Run:
        """Earley over ``data[begin:]`` from ``start``; items are (nt, production, dot, origin) and
        positions are offsets into ``data``."""
        n = len(data)
        charts: dict[int, set[tuple[int, int, int, int]]] = {i: set() for i in range(begin, n + 1)}
        waiting: dict[int, dict[int, list[tuple[int, int, int, int]]]] = {i: {} for i in range(begin, n + 1)}
        empty_done: dict[int, set[int]] = {i: set() for i in range(begin, n + 1)}
        completed_at: set[int] = set()
        alive = False
        for p in range(len(self.cfg.productions[start])):
            charts[begin].add((start, p, 0, begin))
        for i in range(begin, n + 1):
            chart = charts[i]
            agenda = list(chart)
            while agenda:
                nt, p, dot, origin = agenda.pop()
                prod = self.cfg.productions[nt][p]
                advanced: list[tuple[int, int, int, int]] = []
                if dot == len(prod):  # complete
                    if nt in self.cfg.lookahead and not self._lookahead_holds(nt, data, i, memo):
                        continue
                    if nt == start and origin == begin:
                        completed_at.add(i)
                    if origin == i:
                        empty_done[i].add(nt)
                    advanced = [(w_nt, w_p, w_dot + 1, w_origin)
                                for w_nt, w_p, w_dot, w_origin in waiting[origin].get(nt, ())]
                elif prod[dot][0] == "nt":  # predict
                    target = prod[dot][1]
                    waiting[i].setdefault(target, []).append((nt, p, dot, origin))
                    advanced = [(target, q, 0, i) for q in range(len(self.cfg.productions[target]))]
                    if target in empty_done[i]:
                        advanced.append((nt, p, dot + 1, origin))
                elif i == n:
                    alive = True  # a terminal comes next: some byte extends the input
                else:  # scan
                    self._scan(prod[dot], data, i, (nt, p, dot + 1, origin), charts)
                    if viable and _decode(data, i) == "partial":
                        span = _prefix_code_points(data[i:])
                        alive = alive or (prod[dot][0] == "char" and span is not None
                                          and _class_overlaps(prod[dot][1], prod[dot][2], *span))
                for item in advanced:
                    if item not in chart:
                        chart.add(item)
                        agenda.append(item)
        return _Run(frozenset(completed_at), alive)

    @staticmethod
    def _scan(symbol: Symbol, data: bytes, i: int, item: tuple[int, int, int, int],
              charts: dict[int, set[tuple[int, int, int, int]]]) -> None:
        if symbol[0] == "byte":
            if data[i] in symbol[1]:
                charts[i + 1].add(item)
            return
        decoded = _decode(data, i)
        if isinstance(decoded, tuple) and _in_class(decoded[0], symbol[1], symbol[2]):
            charts[i + decoded[1]].add(item)


# ------------------------------------------------------------------------------------------
# Sampling
# ------------------------------------------------------------------------------------------

class _Sampler:
    """Random sentences; beyond ``max_depth`` rule calls it takes the shortest way out."""

    def __init__(self, ir: GrammarIR) -> None:
        self.ir = ir
        self.height = self._min_heights()

    def _min_heights(self) -> dict[str, float]:
        height = {name: float("inf") for name in self.ir.rules}
        changed = True
        while changed:
            changed = False
            for name, rule in self.ir.rules.items():
                h = 1 + self._expr_height(rule.body, height)
                if h < height[name]:
                    height[name] = h
                    changed = True
        return height

    def _expr_height(self, expr: Expr, height: dict[str, float]) -> float:
        if isinstance(expr, (Literal, ByteClass)):
            return 0 if not isinstance(expr, ByteClass) or expr.ranges else float("inf")
        if isinstance(expr, CharClass):
            return 0 if _class_members(expr.ranges, expr.negated) else float("inf")
        if isinstance(expr, RuleRef):
            return height[expr.name]
        if isinstance(expr, Sequence):
            return max((self._expr_height(i, height) for i in expr.items), default=0)
        if isinstance(expr, Choice):
            return min((self._expr_height(a, height) for a in expr.alternatives), default=float("inf"))
        if isinstance(expr, Repeat):
            return 0 if expr.min == 0 else self._expr_height(expr.item, height)
        raise ValueError(f"cannot sample {expr!r}")

    def sample(self, rng: random.Random, max_depth: int) -> bytes:
        if self.height[self.ir.start] == float("inf"):
            raise ValueError("the grammar derives no string")
        out = bytearray()
        self._gen(RuleRef(self.ir.start), rng, 0, max_depth, out)
        return bytes(out)

    def _gen(self, expr: Expr, rng: random.Random, depth: int, max_depth: int, out: bytearray) -> None:
        if isinstance(expr, Literal):
            out += expr.value
        elif isinstance(expr, ByteClass):
            lo, hi = rng.choice(expr.ranges)
            out.append(rng.randint(lo, hi))
        elif isinstance(expr, CharClass):
            out += chr(_pick_code_point(_class_members(expr.ranges, expr.negated), rng)).encode("utf-8")
        elif isinstance(expr, RuleRef):
            self._gen(self.ir.rules[expr.name].body, rng, depth + 1, max_depth, out)
        elif isinstance(expr, Sequence):
            for item in expr.items:
                self._gen(item, rng, depth, max_depth, out)
        elif isinstance(expr, Choice):
            heights = [self._expr_height(a, self.height) for a in expr.alternatives]
            if depth >= max_depth:
                best = min(heights)
                options = [a for a, h in zip(expr.alternatives, heights, strict=True) if h == best]
            else:
                options = [a for a, h in zip(expr.alternatives, heights, strict=True) if h != float("inf")]
            self._gen(rng.choice(options), rng, depth, max_depth, out)
        elif isinstance(expr, Repeat):
            count = expr.min
            if depth < max_depth:
                while (expr.max is None or count < expr.max) and rng.random() < 0.6:
                    count += 1
            for _ in range(count):
                self._gen(expr.item, rng, depth, max_depth, out)
        else:
            raise ValueError(f"cannot sample {expr!r}")


def _pick_code_point(members: list[tuple[int, int]], rng: random.Random) -> int:
    """Mostly ASCII when the class has some, then anything else in it."""
    ascii_part = [(lo, min(hi, 0x7F)) for lo, hi in members if lo <= 0x7F]
    if ascii_part and rng.random() < 0.7:
        lo, hi = rng.choice(ascii_part)
    else:
        lo, hi = rng.choice(members)
    return rng.randint(lo, hi)


# ------------------------------------------------------------------------------------------
# Public functions (compiled grammars are cached per IR object)
# ------------------------------------------------------------------------------------------

_CACHE: dict[int, tuple[GrammarIR, _Recognizer]] = {}


def _recognizer(ir: GrammarIR) -> _Recognizer:
    cached = _CACHE.get(id(ir))
    if cached is None or cached[0] is not ir:
        if len(_CACHE) > 256:
            _CACHE.clear()
        cached = (ir, _Recognizer(ir))
        _CACHE[id(ir)] = cached
    return cached[1]


def accepts(ir: GrammarIR, data: bytes) -> bool:
    """Whether ``data`` is a sentence of the grammar."""
    return _recognizer(ir).accepts(data)


def is_viable_prefix(ir: GrammarIR, data: bytes) -> bool:
    """Whether some continuation of ``data`` (possibly empty) is a sentence of the grammar."""
    return _recognizer(ir).is_viable_prefix(data)


def sample(ir: GrammarIR, rng: random.Random, max_depth: int = 8) -> bytes:
    """A random sentence of the grammar (recursion beyond ``max_depth`` takes the shortest way out)."""
    sampler = _Sampler(ir)
    has_lookahead = any(rule.lookahead is not None for rule in ir.rules.values())
    for _ in range(200):
        out = sampler.sample(rng, max_depth)
        if not has_lookahead or accepts(ir, out):
            return out
    raise ValueError("could not sample a sentence that satisfies the grammar's lookaheads")

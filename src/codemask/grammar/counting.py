"""Large bounded repetitions as nested counting rules, not as copies of their item.

An automaton can only count by copying: ``x{0,1000}`` is a chain of a thousand copies of ``x``,
each a position whose token masks must be classified, and JSON Schema's ``maxLength``/``maxItems``
ask for exactly that. Here such a repetition becomes a few rules that count in a positional number
system instead: a leaf rule holds ``BLOCK`` copies of the item, a rule of the next level holds
``RADIX`` calls of the level below, and so on, so ``x{m,n}`` costs ``O(RADIX · log n)`` states
whatever ``n`` is. The parser's stack of calls into these rules *is* the counter; positions
(automaton states that scan input) exist only in the leaf, and are shared by every count.

``exactly(n)`` spells ``n`` in that number system (most significant level first). ``up_to(n)``
follows the digits of ``n``: a length below ``n`` either has a smaller count of the current unit
(then anything below that unit follows) or the same count and a shorter remainder. The
alternatives cover disjoint lengths, so the language is exactly ``x{m,n}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from codemask.engine import native
from codemask.grammar.ir import Choice, Expr, Repeat, Rule, RuleRef, Sequence, choice, seq

# Copies of the item in the leaf rule; repetitions up to COUNTED_FROM stay plain copies. A leaf as
# long as most tokens: with 16, over 16,384 tokens of a 128k vocabulary left a leaf's frame at each of
# its positions, so those positions listed none and every character of a `maxLength` string walked the
# vocabulary from the parser's own state (a new one per count: 2-3 ms a token); in a leaf of 64 most
# tokens stay inside, and its positions, classified once, serve every count.
BLOCK = 64
RADIX = 8
COUNTED_FROM = 2 * BLOCK


def count_large_repeats(rules: dict[str, Rule]) -> dict[str, Rule]:
    """The rules with every repetition bounded above ``COUNTED_FROM`` made of counting rules (a
    rule without one as it is: with the C extension that is found without walking it in Python)."""
    counter = _Counters(set(rules))
    out = {name: rule if _small_repeats_only(rule.body) else replace(rule, body=counter.rewrite(rule.body))
           for name, rule in rules.items()}
    out.update(counter.new_rules)
    return out


def _small_repeats_only(expr: Expr) -> bool:
    return native.enabled() and native.largest_repeat_bound(expr) <= COUNTED_FROM


@dataclass
class _Counters:
    """The counting rules made so far, shared by every repetition of the same item."""

    taken: set[str]
    new_rules: dict[str, Rule] = field(default_factory=dict)
    _unit_names: dict[tuple[Expr, int], str] = field(default_factory=dict)
    # by identity: each expression kept with its rewrite, so that no other one takes its id
    _rewritten: dict[int, tuple[Expr, Expr]] = field(default_factory=dict)

    def rewrite(self, expr: Expr) -> Expr:
        """``expr`` with its large repetitions counted; the same object where it has none (most
        rules: rebuilding them cost more than the rest of the rewrite), each subexpression
        rewritten once however many rules share it."""
        found = self._rewritten.get(id(expr))
        if found is not None and found[0] is expr:
            return found[1]
        out = self._rewrite(expr)
        self._rewritten[id(expr)] = (expr, out)
        return out

    def _rewrite(self, expr: Expr) -> Expr:
        if isinstance(expr, Sequence):
            items = self._rewritten_parts(expr.items)
            return expr if items is None else seq(*items)
        if isinstance(expr, Repeat):
            item = self.rewrite(expr.item)
            if max(expr.min, expr.max or 0) <= COUNTED_FROM or (expr.max is not None and expr.max < expr.min):
                # small, or out of order (the automaton reports it)
                return expr if item is expr.item else Repeat(item, expr.min, expr.max)
            rest = Repeat(item, 0, None) if expr.max is None else self.up_to(item, expr.max - expr.min)
            return seq(self.exactly(item, expr.min), rest)
        if isinstance(expr, Choice):
            alts = self._rewritten_parts(expr.alternatives)
            return expr if alts is None else choice(*alts)
        return expr

    def _rewritten_parts(self, parts: tuple[Expr, ...]) -> list[Expr] | None:
        """`rewrite` of each part, or None where every part is unchanged."""
        out: list[Expr] | None = None
        for i, part in enumerate(parts):
            new = self.rewrite(part)
            if out is None and new is not part:
                out = list(parts[:i])
            if out is not None:
                out.append(new)
        return out

    def exactly(self, item: Expr, n: int) -> Expr:
        """``item`` exactly ``n`` times: the digits of ``n``, most significant unit first."""
        blocks, rest = divmod(n, BLOCK)
        parts: list[Expr] = [Repeat(item, rest, rest)] if rest else []
        level = 0
        while blocks:
            blocks, digit = divmod(blocks, RADIX)
            if digit:
                parts.append(Repeat(self.unit(item, level), digit, digit))
            level += 1
        return seq(*reversed(parts))

    def up_to(self, item: Expr, n: int) -> Expr:
        """``item`` between 0 and ``n`` times."""
        blocks, rest = divmod(n, BLOCK)
        if not blocks:
            return Repeat(item, 0, rest)
        shorter = seq(self._units_up_to(item, blocks - 1, 0), Repeat(item, 0, BLOCK - 1))
        return choice(shorter, seq(self._units_exactly(item, blocks, 0), Repeat(item, 0, rest)))

    def _units_up_to(self, item: Expr, count: int, level: int) -> Expr:
        """Between 0 and ``count`` units of ``level``."""
        unit = self.unit(item, level)
        higher, digit = divmod(count, RADIX)
        if not higher:
            return Repeat(unit, 0, digit)
        shorter = seq(self._units_up_to(item, higher - 1, level + 1), Repeat(unit, 0, RADIX - 1))
        return choice(shorter, seq(self._units_exactly(item, higher, level + 1), Repeat(unit, 0, digit)))

    def _units_exactly(self, item: Expr, count: int, level: int) -> Expr:
        """Exactly ``count`` units of ``level``."""
        higher, digit = divmod(count, RADIX)
        here = Repeat(self.unit(item, level), digit, digit) if digit else seq()
        return seq(self._units_exactly(item, higher, level + 1), here) if higher else here

    def unit(self, item: Expr, level: int) -> RuleRef:
        """The rule of ``BLOCK · RADIX**level`` copies of ``item``."""
        key = (item, level)
        name = self._unit_names.get(key)
        if name is None:
            body = Repeat(item, BLOCK, BLOCK) if level == 0 else Repeat(self.unit(item, level - 1), RADIX, RADIX)
            name = self._fresh(f"count{len(self._unit_names)}_x{BLOCK * RADIX ** level}")
            self._unit_names[key] = name
            self.new_rules[name] = Rule(name, body)
        return RuleRef(name)

    def _fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

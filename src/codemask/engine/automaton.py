"""Per-rule automata: the grammar IR turned into a recursive transition network (RTN).

Every rule becomes a deterministic, minimised automaton over a symbol alphabet (bytes for
byte-level grammars, terminal ids for the parser level of lexer-mode grammars) whose edges also
include *calls* of other rules. All rules' states share one global numbering, so that the parser
and the mask cache work on flat numpy tables:

- ``trans[state, symbol]``: next state or -1,
- ``accepting[state]``: the rule may end here (its frame may pop),
- ``calls[state]``: ``(callee rule, return state)`` pairs (held as the flat arrays of
  `RTN.call_table`).

Character classes are over Unicode code points; they are compiled here into the UTF-8 byte
sequences that encode them, so the engine itself only ever sees bytes.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Sequence as ReadOnlyList
from dataclasses import dataclass, field
from itertools import pairwise
from types import MappingProxyType
from typing import NamedTuple, overload

import numpy as np

from codemask.engine import native
from codemask.engine.collection import collection_paused
from codemask.engine.state_table import unwritten_rows
from codemask.engine.token_trie import expand_ranges
from codemask.errors import GrammarError
from codemask.grammar.ir import (
    MAX_CODE_POINT,
    SURROGATES,
    ByteClass,
    CharClass,
    Choice,
    Expr,
    Literal,
    Repeat,
    RuleRef,
    Sequence,
    TerminalRef,
    complement_ranges,
    normalize_ranges,
    references,
)

BYTE_ALPHABET = 256
# A bounded repetition is unrolled into copies; beyond this many automaton states we refuse
# rather than build something that would take minutes to compile.
MAX_NFA_STATES = 400_000
# A rule's deterministic automaton is a dense [states, alphabet] table (1 KB a state over bytes)
# that minimisation sorts: beyond this many states (100 MB, seconds to build) we refuse.
MAX_DFA_STATES = 100_000
TOO_LARGE_HINT = ("an enum or alternation of tens of thousands of distinct strings, or a large bounded "
                  "repetition like x{0,100000}, is the usual cause")


# ----------------------------------------------------------------------------- UTF-8

def utf8_byte_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of ``[lo, hi]``.

    Surrogates have no UTF-8 encoding and are left out.
    """
    out: list[list[tuple[int, int]]] = []
    for a, b in _without_surrogates(lo, hi):
        for start, end in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODE_POINT)):
            s, e = max(a, start), min(b, end)
            if s <= e:
                out.extend(_same_length_ranges(list(chr(s).encode()), list(chr(e).encode())))
    return out


def _without_surrogates(lo: int, hi: int) -> list[tuple[int, int]]:
    parts = []
    if lo < SURROGATES[0]:
        parts.append((lo, min(hi, SURROGATES[0] - 1)))
    if hi > SURROGATES[1]:
        parts.append((max(lo, SURROGATES[1] + 1), hi))
    return [(a, b) for a, b in parts if a <= b]


def _same_length_ranges(a: list[int], b: list[int]) -> list[list[tuple[int, int]]]:
    """Split the byte strings between ``a`` and ``b`` (equal length) into per-byte ranges."""
    if len(a) == 1:
        return [[(a[0], b[0])]]
    if a[0] == b[0]:
        return [[(a[0], a[0]), *rest] for rest in _same_length_ranges(a[1:], b[1:])]
    n = len(a) - 1
    low_tail, high_tail = [0x80] * n, [0xBF] * n
    out: list[list[tuple[int, int]]] = []
    first_full, last_full = a[0], b[0]
    if a[1:] != low_tail:
        out.extend([(a[0], a[0]), *rest] for rest in _same_length_ranges(a[1:], high_tail))
        first_full += 1
    tail_part: list[list[tuple[int, int]]] = []
    if b[1:] != high_tail:
        tail_part = [[(b[0], b[0]), *rest] for rest in _same_length_ranges(low_tail, b[1:])]
        last_full -= 1
    if first_full <= last_full:
        out.append([(first_full, last_full)] + [(0x80, 0xBF)] * n)
    return out + tail_part


def class_code_point_ranges(cls: CharClass) -> tuple[tuple[int, int], ...]:
    """The code point ranges a character class matches, negation applied."""
    ranges = normalize_ranges(cls.ranges)
    return complement_ranges(ranges) if cls.negated else ranges


# ----------------------------------------------------------------------------- NFA

class NFA:
    """A Thompson NFA over a symbol alphabet: its states are numbers, its edges flat int lists —
    epsilon edges ``(source, target)``, symbol ranges ``(source, lo, hi, target)`` and calls
    ``(source, rule index, target)``, for the Python subset construction (the C one,
    `native.dfa_of_expr`, builds its own from the expression)."""

    def __init__(self) -> None:
        self.count = 0
        self.eps: list[int] = []
        self.edges: list[int] = []
        self.calls: list[int] = []

    def new_state(self) -> int:
        if self.count >= MAX_NFA_STATES:
            raise GrammarError(f"grammar is too large to compile (over {MAX_NFA_STATES:,} automaton states); "
                               f"{TOO_LARGE_HINT}")
        self.count += 1
        return self.count - 1

    def by_source(self) -> tuple[list[list[int]], list[list[tuple[int, int, int]]], list[list[tuple[int, int]]]]:
        """Per state: its epsilon targets, its symbol ranges ``(lo, hi, target)`` and its calls
        ``(rule, target)`` (the Python subset construction's view)."""
        eps: list[list[int]] = [[] for _ in range(self.count)]
        edges: list[list[tuple[int, int, int]]] = [[] for _ in range(self.count)]
        calls: list[list[tuple[int, int]]] = [[] for _ in range(self.count)]
        flat = self.eps
        for i in range(0, len(flat), 2):
            eps[flat[i]].append(flat[i + 1])
        flat = self.edges
        for i in range(0, len(flat), 4):
            edges[flat[i]].append((flat[i + 1], flat[i + 2], flat[i + 3]))
        flat = self.calls
        for i in range(0, len(flat), 3):
            calls[flat[i]].append((flat[i + 1], flat[i + 2]))
        return eps, edges, calls


class NFABuilder:
    """Builds the NFA of an expression between two given states (Thompson construction)."""

    def __init__(self, nfa: NFA, rule_index: dict[str, int], terminal_index: dict[str, int] | None) -> None:
        self.nfa = nfa
        self.rule_index = rule_index
        self.terminal_index = terminal_index
        self._utf8_cache: dict[tuple[tuple[int, int], ...], list[list[tuple[int, int]]]] = {}

    def build(self, expr: Expr, src: int, dst: int) -> None:
        nfa = self.nfa
        if isinstance(expr, Literal):
            self._chain(src, dst, [(b, b) for b in expr.value])
        elif isinstance(expr, CharClass):
            self._require_bytes("character class")
            for path in self._utf8_paths(class_code_point_ranges(expr)):
                self._chain(src, dst, path)
        elif isinstance(expr, ByteClass):
            self._require_bytes("byte class")
            for lo, hi in normalize_ranges(expr.ranges):
                nfa.edges += (src, lo, hi, dst)
        elif isinstance(expr, RuleRef):
            nfa.calls += (src, self.rule_index[expr.name], dst)
        elif isinstance(expr, TerminalRef):
            if self.terminal_index is None:
                raise GrammarError(f"terminal {expr.name!r} used in a grammar without a lexer")
            symbol = self.terminal_index[expr.name]
            nfa.edges += (src, symbol, symbol, dst)
        elif isinstance(expr, Sequence):
            cur = src
            for i, item in enumerate(expr.items):
                nxt = dst if i == len(expr.items) - 1 else nfa.new_state()
                self.build(item, cur, nxt)
                cur = nxt
            if not expr.items:
                nfa.eps += (src, dst)
        elif isinstance(expr, Choice):
            literals = [alt.value for alt in expr.alternatives if isinstance(alt, Literal)]
            if len(literals) > 1 and self.terminal_index is None:
                self._literal_set(literals, src, dst)
            for alt in expr.alternatives:
                if not (isinstance(alt, Literal) and len(literals) > 1 and self.terminal_index is None):
                    self.build(alt, src, dst)
        elif isinstance(expr, Repeat):
            self._repeat(expr, src, dst)
        else:
            raise TypeError(f"not a grammar expression: {expr!r}")

    def _require_bytes(self, what: str) -> None:
        if self.terminal_index is not None:
            raise GrammarError(f"a {what} cannot appear in a parser rule of a lexer-mode grammar")

    def _utf8_paths(self, ranges: tuple[tuple[int, int], ...]) -> list[list[tuple[int, int]]]:
        paths = self._utf8_cache.get(ranges)
        if paths is None:
            paths = [p for lo, hi in ranges for p in utf8_byte_sequences(lo, hi)]
            paths = _merge_single_byte_paths(paths)
            self._utf8_cache[ranges] = paths
        return paths

    def _chain(self, src: int, dst: int, ranges: list[tuple[int, int]]) -> None:
        nfa = self.nfa
        if not ranges:
            nfa.eps += (src, dst)
            return
        cur = src
        last = len(ranges) - 1
        for i, (lo, hi) in enumerate(ranges):
            nxt = dst if i == last else nfa.new_state()
            nfa.edges += (cur, lo, hi, nxt)
            cur = nxt

    def _literal_set(self, words: list[bytes], src: int, dst: int) -> None:
        """Alternative byte strings as their minimal acyclic automaton (`minimal_word_automaton`)
        between ``src`` and ``dst``: a chain per alternative made an enum of 35,000 values
        400,000 states that the subset construction then walked one by one."""
        trans, final = minimal_word_automaton(words)
        nfa = self.nfa
        state_of = [src] + [nfa.new_state() for _ in range(len(trans) - 1)]
        for state, edges in enumerate(trans):
            here = state_of[state]
            for byte, target in edges.items():
                nfa.edges += (here, byte, byte, state_of[target])
            if final[state]:
                nfa.eps += (here, dst)

    def _repeat(self, expr: Repeat, src: int, dst: int) -> None:
        nfa = self.nfa
        cur = src
        for _ in range(expr.min):
            nxt = nfa.new_state()
            self.build(expr.item, cur, nxt)
            cur = nxt
        if expr.max is None:
            loop = nfa.new_state()
            body_end = nfa.new_state()
            nfa.eps += (cur, loop, body_end, loop, loop, dst)
            self.build(expr.item, loop, body_end)
            return
        if expr.max < expr.min:
            raise GrammarError(f"repetition {{{expr.min},{expr.max}}} has max < min")
        nfa.eps += (cur, dst)
        for _ in range(expr.max - expr.min):
            nxt = nfa.new_state()
            self.build(expr.item, cur, nxt)
            nfa.eps += (nxt, dst)
            cur = nxt


def minimal_word_automaton(words: list[bytes]) -> tuple[list[dict[int, int]], list[bool]]:
    """The minimal deterministic automaton of a finite set of byte strings (state 0 the start):
    per state its transitions (byte -> state) and whether it is final.

    Daciuk et al.'s incremental construction over the sorted words: the states of the previous
    word past its common prefix with the next are final in shape and are merged with an equal
    registered state (same finality, same transitions) or registered, deepest first. Linear in
    the total length; iterative, so a long word is no recursion."""
    trans: list[dict[int, int]] = [{}]
    final = [False]
    register: dict[tuple[bool, tuple[tuple[int, int], ...]], int] = {}
    path = [0]  # the states along the previous word
    previous = b""

    def settle(depth: int) -> None:
        """Merge or register the previous word's states below ``path[depth]``, deepest first."""
        while len(path) - 1 > depth:
            child = path.pop()
            parent, byte = path[-1], previous[len(path) - 1]
            signature = (final[child], tuple(sorted(trans[child].items())))
            found = register.get(signature)
            if found is None:
                register[signature] = child
            else:
                trans[parent][byte] = found

    for word in sorted(set(words)):
        common = 0
        limit = min(len(word), len(previous))
        while common < limit and word[common] == previous[common]:
            common += 1
        settle(common)
        for byte in word[common:]:
            trans.append({})
            final.append(False)
            trans[path[-1]][byte] = len(trans) - 1
            path.append(len(trans) - 1)
        final[path[-1]] = True
        previous = word
    settle(0)
    used = sorted({0} | {t for edges in trans for t in edges.values()})
    renumber = {old: new for new, old in enumerate(used)}
    return [{b: renumber[t] for b, t in trans[old].items()} for old in used], [final[old] for old in used]


def _merge_single_byte_paths(paths: list[list[tuple[int, int]]]) -> list[list[tuple[int, int]]]:
    """Fuse one-byte paths into as few ranges as possible (ASCII classes stay one edge)."""
    singles = normalize_ranges([p[0] for p in paths if len(p) == 1])
    return [[r] for r in singles] + [p for p in paths if len(p) > 1]


# ----------------------------------------------------------------------------- DFA

@dataclass
class DFA:
    """A deterministic automaton of one rule: dense transitions plus call edges."""

    trans: np.ndarray  # [n, alphabet] int32, -1 = none
    accepting: np.ndarray  # [n] bool
    calls: ReadOnlyList[Mapping[int, int]]  # per state: callee rule -> target state
    start: int = 0
    # what `compile_expr` keeps it under (equal keys: equal automata), where it does
    key: object = field(default=None, init=False, compare=False, repr=False)

    @functools.cached_property
    def call_array(self) -> np.ndarray:
        """The calls as int32 rows ``(state, callee rule, target state)``, by state then callee:
        what `build_rtn` numbers into the network's call table with array operations."""
        rows = [(state, rule, target) for state, c in enumerate(self.calls) for rule, target in sorted(c.items())]
        return np.array(rows, dtype=np.int32).reshape(-1, 3)

    @functools.cached_property
    def first_bytes(self) -> np.ndarray:
        """Per state, the symbols it takes, as bit sets of ``ceil(alphabet / 64)`` uint64 words (bit
        ``a % 64`` of word ``a // 64``): what the network's `RTN.follow_bytes` reads of its rules'
        states instead of their rows. The C construction sets them as it makes the runs."""
        words = -(-self.trans.shape[1] // 64)
        taken = np.zeros((len(self.trans), words * 64), dtype=bool)
        taken[:, : self.trans.shape[1]] = self.trans >= 0
        return np.packbits(taken, axis=1, bitorder="little").view("<u8")

    @property
    def rows_or_runs(self) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """What `build_rtn` writes into the network (`native.stack_tables`): the dense rows here."""
        return self.trans

    def seal(self) -> None:
        """Make the arrays read-only: a cached automaton is shared by every grammar that uses it."""
        self.trans.flags.writeable = False
        self.accepting.flags.writeable = False


class RunsDFA(DFA):
    """A DFA made in C (`native.dfa_of_expr`) whose transitions are kept as runs of symbols to one
    target (int32 ``(lo, hi, target)`` rows, state ``s``'s from ``run_lo[s]`` to ``run_lo[s + 1]``).
    The network's dense rows are written from the runs once, by `build_rtn`; `trans` is written
    only where something else reads it (lexer mode, the JSON Schema product automata, the Python
    minimiser, the tests). A large schema's rules have tens of thousands of states: writing their
    rows here and copying them into the network was a third of laying the network out. (Made by
    `_native_dfa` only: `dataclasses.replace` does not apply.)"""

    def __init__(self, runs: np.ndarray, run_lo: np.ndarray, accepting: np.ndarray,
                 calls: ReadOnlyList[Mapping[int, int]], alphabet: int) -> None:
        self.runs = runs
        self.run_lo = run_lo
        self.alphabet = alphabet
        self.accepting = accepting
        self.calls = calls
        self.start = 0
        self.key = None

    def __repr__(self) -> str:  # (the dataclass's would write the dense rows to print them)
        return f"RunsDFA(states={len(self.accepting)}, runs={len(self.runs)}, alphabet={self.alphabet})"

    @functools.cached_property
    def trans(self) -> np.ndarray:  # type: ignore[override]
        """The dense rows, written from the runs on first use (read-only)."""
        rows = np.empty((len(self.accepting), self.alphabet), dtype=np.int32)
        native.stack_tables([(self.runs, self.run_lo)], rows)
        rows.flags.writeable = False
        return rows

    @property
    def rows_or_runs(self) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """The runs: `build_rtn` writes the dense rows straight into the network."""
        return self.runs, self.run_lo

    def seal(self) -> None:
        """Make the arrays read-only (the rows are, once written)."""
        for array in (self.runs, self.run_lo, self.accepting):
            array.flags.writeable = False


def determinize(nfa: NFA, start: int, final: int, alphabet: int) -> DFA:
    """Subset construction over symbol ranges and call edges."""
    closure_cache: dict[frozenset[int], frozenset[int]] = {}
    eps, edges, nfa_calls = nfa.by_source()

    def closure(states: frozenset[int]) -> frozenset[int]:
        cached = closure_cache.get(states)
        if cached is not None:
            return cached
        seen = set(states)
        todo = list(states)
        while todo:
            s = todo.pop()
            for t in eps[s]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        result = frozenset(seen)
        closure_cache[states] = result
        return result

    first = closure(frozenset([start]))
    index = {first: 0}
    order = [first]
    rows: list[np.ndarray] = []
    calls: list[dict[int, int]] = []
    for subset in order:
        if len(order) > MAX_DFA_STATES:
            raise GrammarError(f"grammar is too large to compile (over {MAX_DFA_STATES:,} deterministic automaton "
                               f"states in one rule); {TOO_LARGE_HINT}")
        row = np.full(alphabet, -1, dtype=np.int32)
        for lo, hi, targets in _partition_edges([e for s in subset for e in edges[s]]):
            row[lo : hi + 1] = _intern(closure(targets), index, order)
        rows.append(row)
        by_rule: dict[int, set[int]] = {}
        for s in subset:
            for rule, target in nfa_calls[s]:
                by_rule.setdefault(rule, set()).add(target)
        calls.append({rule: _intern(closure(frozenset(t)), index, order) for rule, t in sorted(by_rule.items())})
    accepting = np.array([final in subset for subset in order], dtype=bool)
    trans = np.stack(rows) if rows else np.zeros((0, alphabet), dtype=np.int32)
    return DFA(trans=trans, accepting=accepting, calls=calls)


def _intern(subset: frozenset[int], index: dict[frozenset[int], int], order: list[frozenset[int]]) -> int:
    found = index.get(subset)
    if found is None:
        found = index[subset] = len(order)
        order.append(subset)
    return found


def _partition_edges(edges: list[tuple[int, int, int]]) -> list[tuple[int, int, frozenset[int]]]:
    """Split overlapping symbol ranges into disjoint ranges, each with its set of targets.

    One sweep over the range ends, keeping a count per target of the ranges open at each point.
    """
    if len(edges) <= 1:
        return [(lo, hi, frozenset([target])) for lo, hi, target in edges]
    events: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, target in edges:
        events.setdefault(lo, []).append((target, 1))
        events.setdefault(hi + 1, []).append((target, -1))
    open_count: dict[int, int] = {}
    out = []
    points = sorted(events)
    for point, nxt in pairwise(points):
        for target, delta in events[point]:
            count = open_count.get(target, 0) + delta
            if count:
                open_count[target] = count
            else:
                del open_count[target]
        if open_count:
            out.append((point, nxt - 1, frozenset(open_count)))
    return out


def minimize(dfa: DFA) -> DFA:
    """Merge equivalent states (Moore partition refinement, vectorised over states).

    Each round numbers the distinct rows of ``[class, call classes, target classes per symbol
    class]``. Symbols are first grouped into classes of identical columns (a rule over bytes
    rarely distinguishes more than a few dozen), and calls become one column per callee rule,
    so a round is a handful of array operations however many states there are.
    """
    n = len(dfa.accepting)
    if n <= 1:
        return dfa
    first_columns, _ = distinct_rows(dfa.trans.T)
    trans = dfa.trans[:, np.sort(first_columns)]
    callees = sorted({r for c in dfa.calls for r in c})
    call_targets = np.full((n, len(callees)), -1, dtype=np.int64)
    for s, c in enumerate(dfa.calls):
        for j, r in enumerate(callees):
            call_targets[s, j] = c.get(r, -1)
    targets = np.concatenate([trans.astype(np.int64), call_targets], axis=1)
    part = dfa.accepting.astype(np.int64)
    count = len(np.unique(part))
    for round_number in itertools.count(1):
        ext = np.append(part, -1)  # -1 (no edge) maps to ext[-1] = -1
        _, new_part = distinct_rows(np.concatenate([part[:, None], ext[targets]], axis=1))
        new_count = int(new_part.max()) + 1
        part = new_part
        if new_count == count:
            break
        count = new_count
        if round_number == MOORE_ROUNDS:  # a long chain (a long literal) splits a state per round
            levelled = _acyclic_classes(dfa.accepting, targets)
            if levelled is not None:
                part, count = levelled
                break
    # renumber so that the start state's class is 0 and classes appear in first-seen order
    visit = part[np.concatenate([[dfa.start], np.arange(n)])]
    _, first_seen = np.unique(visit, return_index=True)
    renumber = np.empty(count, dtype=np.int32)
    renumber[visit[np.sort(first_seen)]] = np.arange(count, dtype=np.int32)
    remap = renumber[part]
    _, reps = np.unique(remap, return_index=True)  # the first state of each class
    rows = dfa.trans[reps]
    out_trans = np.where(rows >= 0, remap[np.maximum(rows, 0)], -1).astype(np.int32)
    accepting = dfa.accepting[reps]
    calls = [{r: int(remap[t]) for r, t in dfa.calls[s].items()} for s in reps.tolist()]
    return DFA(trans=out_trans, accepting=accepting, calls=calls, start=0)


# Moore rounds after which `minimize` tries the level-by-level partition of an acyclic DFA: a round
# costs a few array operations over all states, and a chain of n states takes n rounds.
MOORE_ROUNDS = 64


def _acyclic_classes(accepting: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, int] | None:
    """Moore's final partition of a DFA without cycles, and its class count (None with a cycle).

    That partition is bisimilarity (same acceptance, targets in the same classes per column), and
    bisimilar states of an acyclic graph have the same height: so the states are classed a level
    at a time from the sinks (Kahn's order), each level's rows over the classes of lower levels,
    which costs time linear in the edges where Moore's rounds are quadratic on a chain.
    """
    n = len(accepting)
    sources, columns = np.nonzero(targets >= 0)
    ends = targets[sources, columns]
    remaining = np.bincount(sources, minlength=n)
    by_end = np.argsort(ends, kind="stable")
    predecessors = sources[by_end]
    bounds = np.searchsorted(ends[by_end], np.arange(n + 1))
    classes = np.full(n, -1, dtype=np.int64)
    frontier = np.flatnonzero(remaining == 0)
    count = done = 0
    while len(frontier):
        if len(frontier) == 1:  # (a chain's levels: one state, a class of its own)
            classes[frontier] = count
            count += 1
        else:
            rows = targets[frontier]
            rows = np.where(rows >= 0, classes[np.maximum(rows, 0)], -1)
            _, local = distinct_rows(np.concatenate([accepting[frontier, None].astype(np.int64), rows], axis=1))
            classes[frontier] = count + local
            count += int(local.max()) + 1
        done += len(frontier)
        before = predecessors[expand_ranges(bounds[frontier], bounds[frontier + 1])]
        np.subtract.at(remaining, before, 1)
        candidates = np.unique(before)
        frontier = candidates[remaining[candidates] == 0]
    return (classes, count) if done == n else None


def distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index of the first of each distinct row of a 2-D int array, and every row's class.

    Rows are keyed by one int64 each (a random linear form with odd weights, wrapping), numbered
    by a 1-D ``np.unique`` and checked against their class's first row: exact, and much faster
    than ``np.unique(axis=0)``, which sorts whole rows; a collision, however unlikely, falls back
    to it.
    """
    table = np.ascontiguousarray(table, dtype=np.int64)
    if table.shape[1] <= len(_HASH_WEIGHTS):
        with np.errstate(over="ignore"):
            keys = table @ _HASH_WEIGHTS[: table.shape[1]]
        _, first, classes = np.unique(keys, return_index=True, return_inverse=True)
        classes = classes.reshape(-1)
        if (table == table[first[classes]]).all():
            return first, classes
    _, first, classes = np.unique(table, axis=0, return_index=True, return_inverse=True)
    return first, classes.reshape(-1)


_HASH_WEIGHTS = np.random.default_rng(20261123).integers(1, 2**62, size=4096, dtype=np.int64) | 1


def trim(dfa: DFA) -> DFA:
    """Drop states that cannot reach acceptance (calls to other rules count as passable: the
    optimiser has already removed rules that match nothing).

    Keeping only co-reachable states is what lets the parser treat "some stack is alive" as
    "some continuation exists": a dead end never survives a step. One backward search from the
    accepting states over the reversed edges finds them.
    """
    n = len(dfa.accepting)
    alive = _coreachable(dfa)
    if alive.all():
        return dfa
    if not alive[dfa.start]:
        alive[dfa.start] = True  # an empty language: keep a lone start state
    remap = np.full(n + 1, -1, dtype=np.int32)
    keep = np.flatnonzero(alive)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    trans = dfa.trans[keep]
    trans = np.where(trans >= 0, remap[trans], -1).astype(np.int32)
    calls = [{r: int(remap[t]) for r, t in dfa.calls[s].items() if remap[t] >= 0} for s in keep.tolist()]
    return DFA(trans=trans, accepting=dfa.accepting[keep], calls=calls, start=int(remap[dfa.start]))


def _coreachable(dfa: DFA) -> np.ndarray:
    """States from which an accepting state can be reached (symbol and call edges alike)."""
    n = len(dfa.accepting)
    src, symbol = np.nonzero(dfa.trans >= 0)
    edges = [src.astype(np.int64) * n + dfa.trans[src, symbol]]
    edges += [np.array([s * n + t for s, c in enumerate(dfa.calls) for t in c.values()], dtype=np.int64)]
    pairs = np.unique(np.concatenate(edges))
    sources, targets = pairs // n, pairs % n
    order = np.argsort(targets, kind="stable")
    sources, bounds = sources[order], np.searchsorted(targets[order], np.arange(n + 1))
    alive = dfa.accepting.copy()
    todo = np.flatnonzero(alive).tolist()
    while todo:
        t = todo.pop()
        for s in sources[bounds[t]:bounds[t + 1]].tolist():
            if not alive[s]:
                alive[s] = True
                todo.append(s)
    return alive


def compile_expr(expr: Expr, rule_index: dict[str, int], alphabet: int,
                 terminal_index: dict[str, int] | None = None) -> DFA:
    """The minimised DFA of one rule body (shared between grammars that have the same body).

    A body's automaton depends only on the body, the alphabet and the indices of the rules and
    terminals it names, so generated grammars (JSON Schema) reuse the automata of their common
    pieces — strings, numbers, whitespace — from earlier compilations in the process.
    """
    if terminal_index is not None:  # lexer-mode parser rules: compiled once per grammar anyway
        return _build_dfa(expr, rule_index, alphabet, terminal_index)
    key: tuple[object, ...]
    if native.enabled():  # (a digest made in C: hashing and comparing a large expression walked it twice)
        key = (native.expr_digest(expr, rule_index), alphabet)
    else:
        key = (expr, alphabet, tuple(rule_index.get(r, -1) for r in sorted(references(expr))))
    with _DFA_CACHE_LOCK:
        found = _DFA_CACHE.get(key)
        if found is not None:
            _DFA_CACHE.move_to_end(key)
            return found
    dfa = _build_dfa(expr, rule_index, alphabet, None)
    dfa.key = key
    dfa.seal()
    with _DFA_CACHE_LOCK:
        _DFA_CACHE[key] = dfa
        if len(_DFA_CACHE) > DFA_CACHE_SIZE:
            _DFA_CACHE.popitem(last=False)
    return dfa


def _build_dfa(expr: Expr, rule_index: dict[str, int], alphabet: int, terminal_index: dict[str, int] | None) -> DFA:
    if native.enabled():
        return _native_dfa(expr, rule_index, alphabet, terminal_index)
    with collection_paused():  # (`collection`: the NFA's lists and the subsets all live to the end)
        nfa = NFA()
        start, final = nfa.new_state(), nfa.new_state()
        NFABuilder(nfa, rule_index, terminal_index).build(expr, start, final)
        return minimize(trim(determinize(nfa, start, final, alphabet)))


def _native_dfa(expr: Expr, rule_index: dict[str, int], alphabet: int, terminal_index: dict[str, int] | None) -> DFA:
    """`_build_dfa` in C (`native.dfa_of_expr`): the same automaton, numbered alike (a minimal DFA's
    numbering, breadth first from its start, depends on its language alone)."""
    try:
        runs, run_lo, accepting, call_list, first = native.dfa_of_expr(expr, rule_index, terminal_index, alphabet,
                                                                       MAX_NFA_STATES, MAX_DFA_STATES)
    except OverflowError as error:  # (C says which limit; the message is the Python construction's)
        if "deterministic" in str(error):
            raise GrammarError(f"grammar is too large to compile (over {MAX_DFA_STATES:,} deterministic automaton "
                               f"states in one rule); {TOO_LARGE_HINT}") from None
        raise GrammarError(f"grammar is too large to compile (over {MAX_NFA_STATES:,} automaton states); "
                           f"{TOO_LARGE_HINT}") from None
    dfa = RunsDFA(runs, run_lo, accepting, _CallRows(call_list, len(accepting)), alphabet)
    dfa.__dict__["call_array"] = call_list.reshape(-1, 3)  # (`DFA.call_array`'s value, as C made it)
    dfa.__dict__["first_bytes"] = first  # (`DFA.first_bytes`' value, set as C made the runs)
    return dfa


_NO_CALLS: Mapping[int, int] = MappingProxyType({})  # (shared by every state that calls nothing)


class _CallRows(ReadOnlyList[Mapping[int, int]]):
    """`DFA.calls` of an automaton made in C, read from its call array when first asked: the network
    reads the array (`DFA.call_array`), and only the Python minimiser and the tests read the rows,
    whose dicts were a twentieth of laying out a large schema's network."""

    def __init__(self, call_list: np.ndarray, states: int) -> None:
        self._call_list = call_list
        self._states = states

    @functools.cached_property
    def _rows(self) -> list[Mapping[int, int]]:
        rows: list[Mapping[int, int]] = [_NO_CALLS] * self._states
        found: dict[int, dict[int, int]] = {}
        for state, rule, target in self._call_list.tolist():  # (by state, then rule)
            found.setdefault(state, {})[rule] = target
        for state, called in found.items():
            rows[state] = called
        return rows

    def __len__(self) -> int:
        return self._states

    @overload
    def __getitem__(self, index: int) -> Mapping[int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> ReadOnlyList[Mapping[int, int]]: ...

    def __getitem__(self, index: int | slice) -> Mapping[int, int] | ReadOnlyList[Mapping[int, int]]:
        return self._rows[index]

    def __eq__(self, other: object) -> bool:
        return self._rows == list(other) if isinstance(other, ReadOnlyList) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


# Rule automata kept for reuse across compilations (bodies with their callee indices).
DFA_CACHE_SIZE = 4096
_DFA_CACHE: OrderedDict[tuple[object, ...], DFA] = OrderedDict()
_DFA_CACHE_LOCK = threading.Lock()


def clear_rule_automata() -> None:
    """Forget the rule automata kept for reuse (`compile_expr`)."""
    with _DFA_CACHE_LOCK:
        _DFA_CACHE.clear()


# ----------------------------------------------------------------------------- the network

@dataclass
class RTN:
    """All rules' automata in one global state numbering."""

    trans: np.ndarray  # [S, alphabet] int32
    accepting: np.ndarray  # [S] bool
    # the calls: state ``q``'s are ``call_lo[q]:call_lo[q + 1]`` (int64 [S + 1]) of ``call_callee``
    # (the callee rule) and ``call_ret`` (the state returned to), both int32, by state then callee
    call_lo: np.ndarray
    call_callee: np.ndarray
    call_ret: np.ndarray
    rule_names: list[str]
    rule_start: np.ndarray  # [R] int32: each rule's start state
    state_rule: np.ndarray  # [S] int32: the rule each state belongs to
    start_rule: int
    shared: np.ndarray | None = None  # [R] bool: rules whose masks are shared between grammars (`Rule.shared`)
    # [R]: each rule automaton's `DFA.key`, for this process only (not part of a cached grammar)
    rule_keys: list[object] | None = field(default=None, init=False, compare=False, repr=False)
    # uint64 [S, 4]: each state's bytes (`DFA.first_bytes`) where its rule automata came with them
    # (the C construction's), for `follow_bytes`; for this process only, like `rule_keys`
    first_bytes: np.ndarray | None = field(default=None, init=False, compare=False, repr=False)
    # whether every transition and call is known to lie in range: the C extension stacked its
    # table (checking each target) from rule automata this process made; a parser core's C
    # interner then skips its own pass over the table. For this process only, like `rule_keys`
    in_range: bool = field(default=False, init=False, compare=False, repr=False)

    def is_shared(self, rule: int) -> bool:
        return self.shared is not None and bool(self.shared[rule])

    @functools.cached_property
    def rule_bounds(self) -> list[int]:
        """Rule ``r``'s states are ``rule_bounds[r]`` to ``rule_bounds[r + 1]`` (states are numbered
        rule by rule). Made once: a search of ``state_rule`` for a Python int copies the whole array."""
        rules = np.arange(len(self.rule_names) + 1, dtype=self.state_rule.dtype)
        return np.searchsorted(self.state_rule, rules).tolist()

    @property
    def num_states(self) -> int:
        return len(self.accepting)

    @functools.cached_property
    def scanning(self) -> np.ndarray:
        """States with at least one symbol transition (the tops a parser stack can wait on)."""
        return np.asarray((self.trans >= 0).any(axis=1))

    @property
    def call_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The calls as arrays: state ``q``'s are ``call_lo[q]:call_lo[q + 1]``, each with its callee
        rule and return state (``(call_lo, callee, ret)``; int64, int32, int32)."""
        return self.call_lo, self.call_callee, self.call_ret

    @functools.cached_property
    def calls(self) -> list[tuple[tuple[int, int], ...]]:
        """Per state, its ``(callee rule, return state)`` pairs (`call_table` read as tuples)."""
        pairs = list(zip(self.call_callee.tolist(), self.call_ret.tolist(), strict=True))
        bounds = self.call_lo.tolist()
        return [tuple(pairs[lo:hi]) for lo, hi in pairwise(bounds)]

    @functools.cached_property
    def call_sites(self) -> np.ndarray:
        """The state each call of `call_table` is made from (int64)."""
        call_lo = self.call_table[0]
        return np.repeat(np.arange(self.num_states, dtype=np.int64), np.diff(call_lo))

    @functools.cached_property
    def pure_final(self) -> np.ndarray:
        """Accepting states with nothing after them: a call returning here is a tail call."""
        no_calls = np.diff(self.call_table[0]) == 0
        return np.asarray(self.accepting & ~self.scanning & no_calls)

    def scan_bits(self, states: np.ndarray) -> list[int]:
        """The symbols each of ``states`` takes itself, as bit sets (bit ``a`` = symbol ``a``)."""
        packed = np.packbits(self.trans[states] >= 0, axis=1, bitorder="little")
        width = packed.shape[1]
        data = packed.tobytes()
        return [int.from_bytes(data[i * width:(i + 1) * width], "little") for i in range(len(states))]

    @functools.cached_property
    def call_first_sets(self) -> tuple[dict[int, int], dict[int, bool]]:
        """`parser.first_sets` of the states that make calls, are called into (rule starts) or are
        returned to, the only ones whose first symbols go beyond their own: a worklist over the
        calls alone, so that a grammar's size in states costs nothing here."""
        call_lo, callee, ret = self.call_table
        starts = self.rule_start[callee].astype(np.int64)
        callers = np.flatnonzero(np.diff(call_lo))
        needed = np.unique(np.concatenate([callers, starts, ret.astype(np.int64)]))
        first = dict(zip(needed.tolist(), self.scan_bits(needed), strict=True))
        nullable = dict(zip(needed.tolist(), self.accepting[needed].tolist(), strict=True))
        site_calls = {int(q): list(zip(starts[call_lo[q]:call_lo[q + 1]].tolist(),
                                       ret[call_lo[q]:call_lo[q + 1]].tolist(), strict=True)) for q in callers}
        users: dict[int, list[int]] = {}
        for q, calls in site_calls.items():
            for start, back in calls:
                users.setdefault(start, []).append(q)
                users.setdefault(back, []).append(q)
        todo = list(site_calls)
        while todo:
            q = todo.pop()
            bits, ends = first[q], nullable[q]
            for start, back in site_calls[q]:
                bits |= first[start]
                if nullable[start]:
                    bits |= first[back]
                    ends = ends or nullable[back]
            if bits != first[q] or ends != nullable[q]:
                first[q], nullable[q] = bits, ends
                todo.extend(users.get(q, ()))
        return first, nullable

    def follow_bytes(self) -> np.ndarray:
        """``[rules, 256]`` bool: the bytes that can come right after each rule ends.

        A token that leaves a rule's frame and continues with a byte outside this set is rejected
        whatever the caller, which keeps the uncertain sets small (rules ending in optional
        whitespace would otherwise make every space-prefixed token uncertain). A callee is followed
        by what its return state takes first, and where that state may end its own frame, by what
        follows the calling rule: a worklist over the calls (`call_first_sets`; in C where the
        extension is loaded, `native.follow_bytes`, for byte-level grammars).
        """
        if native.enabled() and self.trans.shape[1] == BYTE_ALPHABET:
            return native.follow_bytes(self)
        first, nullable = self.call_first_sets
        _call_lo, callee, ret = self.call_table
        owner = self.state_rule[self.call_sites].tolist()
        follow = [0] * len(self.rule_names)
        passes: dict[int, set[int]] = {}  # rule -> the rules it calls last (what follows it follows them)
        for rule, called, back in zip(owner, callee.tolist(), ret.tolist(), strict=True):
            follow[called] |= first[back]
            if nullable[back]:
                passes.setdefault(rule, set()).add(called)
        todo = list(passes)
        while todo:
            rule = todo.pop()
            for called in passes.get(rule, ()):
                grown = follow[called] | follow[rule]
                if grown != follow[called]:
                    follow[called] = grown
                    todo.append(called)
        alphabet = self.trans.shape[1]
        data = b"".join(bits.to_bytes((alphabet + 7) // 8, "little") for bits in follow)
        rows = np.frombuffer(data, dtype=np.uint8).reshape(len(follow), -1)
        return np.unpackbits(rows, axis=1, bitorder="little", count=alphabet).astype(bool)

    def rule_calls(self, limit: int) -> RuleCalls:
        """The rules' call graph (`RuleCalls`; ``limit``: the states past which a rule with its
        callees is `RuleCalls.unshared`), in C where the extension is loaded: made at a grammar's
        first mask, where in Python it took half a millisecond of a small schema's few."""
        owner = self.state_rule[self.call_sites].astype(np.int32)
        _call_lo, callee, ret = self.call_table
        tail = self.pure_final[ret]
        sizes = np.bincount(self.state_rule, minlength=len(self.rule_names)).astype(np.int32)
        if native.enabled():
            return RuleCalls(*native.rule_graph(owner, callee, tail, sizes, limit))
        return _rule_calls(owner, callee, tail, sizes, limit)


class RuleCalls(NamedTuple):
    """The rules' call graph as the mask cache reads it (`RTN.rule_calls`)."""

    callee_lo: np.ndarray  # int32 [rules + 1]: rule r calls callees[callee_lo[r]:callee_lo[r + 1]]
    callees: np.ndarray  # int32: each rule's distinct callees, ascending
    # bool [rules]: recursive, calling a recursive rule, or of more than `limit` states with its
    # callees (each counted once per caller, summed down the call graph)
    unshared: np.ndarray
    # bool [rules]: whether its frame can sit on top of another rule's frame; a rule called only in
    # tail position by rules that have no caller themselves always runs at the bottom of the stack:
    # when it ends, the input ends, so nothing can follow it
    with_callers: np.ndarray


def _rule_calls(owner: np.ndarray, callee: np.ndarray, tail: np.ndarray, sizes: np.ndarray, limit: int) -> RuleCalls:
    """`RTN.rule_calls` without the extension (and the tests' oracle for it)."""
    count = len(sizes)
    pairs = sorted(set(zip(owner.tolist(), callee.tolist(), strict=True)))
    callees: list[list[int]] = [[] for _ in range(count)]
    for rule, called in pairs:
        callees[rule].append(called)
    callee_lo = np.zeros(count + 1, dtype=np.int32)
    callee_lo[1:] = np.cumsum([len(c) for c in callees])
    flat = np.array([c for cs in callees for c in cs], dtype=np.int32)
    with_callers = np.zeros(count, dtype=bool)
    found = set(callee[~tail].tolist())
    tail_edges: dict[int, set[int]] = {}
    for rule, called in zip(owner[tail].tolist(), callee[tail].tolist(), strict=True):
        tail_edges.setdefault(rule, set()).add(called)
    todo = list(found)
    while todo:
        for called in tail_edges.get(todo.pop(), ()):
            if called not in found:
                found.add(called)
                todo.append(called)
    with_callers[list(found)] = True
    return RuleCalls(callee_lo, flat, _unshared_rules(callees, sizes.tolist(), limit), with_callers)


def _unshared_rules(callees: list[list[int]], sizes: list[int], limit: int) -> np.ndarray:
    """`RuleCalls.unshared`: a depth-first search, callees finished first."""
    count = len(callees)
    size = list(sizes)
    out = [states > limit for states in size]
    color = [0] * count  # 0 unseen, 1 on the depth-first path, 2 done
    for root in range(count):
        if color[root]:
            continue
        stack = [root]
        while stack:
            rule = stack[-1]
            if color[rule] == 0:
                color[rule] = 1
                for called in callees[rule]:
                    if color[called] == 1:
                        out[rule] = True  # a call back into the path: recursion
                    elif color[called] == 0:
                        stack.append(called)
                continue
            stack.pop()
            if color[rule] == 2:
                continue
            color[rule] = 2
            size[rule] += sum(size[c] for c in callees[rule])  # (callees are done first)
            out[rule] = out[rule] or size[rule] > limit or any(out[c] for c in callees[rule])
    return np.array(out, dtype=bool)


def _rule_dfa(name: str, body: Expr, rule_index: dict[str, int], alphabet: int,
              terminal_index: dict[str, int] | None) -> DFA:
    """`compile_expr` of one rule, a refusal naming the rule."""
    try:
        return compile_expr(body, rule_index, alphabet, terminal_index)
    except GrammarError as error:
        raise GrammarError(f"rule {name!r}: {error}") from None


def _call_table(call_arrays: list[np.ndarray], offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`RTN.call_table` from each rule automaton's `DFA.call_array`, its states moved by the rule's
    ``offsets``. Each array is by state then callee (C's `native.dfa_of_expr` makes its calls in
    that order, `DFA.call_array` sorts a Python automaton's), and the rules' states follow each
    other, so the concatenation is in the network's state order already."""
    counts = [len(a) for a in call_arrays]
    flat = np.concatenate(call_arrays).astype(np.int64) if sum(counts) else np.zeros((0, 3), dtype=np.int64)
    moved = np.repeat(offsets[:-1], counts)
    per_state = np.bincount(flat[:, 0] + moved, minlength=int(offsets[-1]))
    call_lo = np.zeros(int(offsets[-1]) + 1, dtype=np.int64)
    np.cumsum(per_state, out=call_lo[1:])
    return call_lo, flat[:, 1].astype(np.int32), (flat[:, 2] + moved).astype(np.int32)


def build_rtn(rules: dict[str, Expr], start: str, alphabet: int = BYTE_ALPHABET,
              terminal_index: dict[str, int] | None = None, shared: frozenset[str] = frozenset()) -> RTN:
    """Compile every rule body and number all states globally (``shared``: `Rule.shared` rules)."""
    names = list(rules)
    rule_index = {name: i for i, name in enumerate(names)}
    dfas = [_rule_dfa(name, rules[name], rule_index, alphabet, terminal_index) for name in names]
    sizes = np.array([len(d.accepting) for d in dfas], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    state_rule = np.repeat(np.arange(len(dfas), dtype=np.int32), sizes)
    trans = unwritten_rows(int(offsets[-1]), alphabet, whole=True)
    scanning = None
    if native.enabled():  # (one pass over a table of tens of megabytes, which also finds `RTN.scanning`)
        scanning = native.stack_tables([d.rows_or_runs for d in dfas], trans)
    else:
        np.concatenate([d.trans for d in dfas], out=trans, casting="same_kind")
        np.add(trans, offsets[state_rule].astype(np.int32)[:, None], out=trans, where=trans >= 0)
    call_lo, call_callee, call_ret = _call_table([d.call_array for d in dfas], offsets)
    rtn = RTN(
        trans=trans,
        accepting=np.concatenate([d.accepting for d in dfas]),
        call_lo=call_lo,
        call_callee=call_callee,
        call_ret=call_ret,
        rule_names=names,
        rule_start=np.array([off + d.start for d, off in zip(dfas, offsets[:-1].tolist(), strict=True)],
                            dtype=np.int32),
        state_rule=state_rule,
        start_rule=rule_index[start],
        shared=np.array([name in shared for name in names], dtype=bool),
    )
    rtn.rule_keys = [d.key for d in dfas]
    if alphabet == BYTE_ALPHABET and all("first_bytes" in d.__dict__ for d in dfas):  # (made with the automata)
        rtn.first_bytes = np.concatenate([d.first_bytes for d in dfas])
    if scanning is not None:
        rtn.__dict__["scanning"] = scanning  # (`RTN.scanning`'s cached value: its own pass read the whole table again)
        rtn.in_range = True  # (the calls are the automata's, which C and the minimiser number in range)
    return rtn

"""The parser over a recursive transition network, with interned states and memoised steps.

A *stack node* is an RTN state on top of a set of parent nodes (a graph-structured stack, as in
GLR parsing; the set is a sorted tuple of ids, so its order is fixed), interned to an integer id,
so equal stacks are one object and sharing is free. With the C extension the nodes are kept in C
only (``node_state`` and ``node_parents`` read them): a long-running process makes millions of them, and
as Python lists they were most of the garbage collector's work.

A *parser state* is the set of nodes a non-deterministic parse can be in after closure (calls
pushed, finished rules popped), reduced to the nodes that wait on a byte, with nodes of the same
RTN state merged into one node whose parents are the union of theirs: an ambiguous grammar then
costs a few more parents, not exponentially many stacks. Plus one flag: whether a stack reached
the bottom. Parser states are interned to integer ids too, and ``table[state, byte]`` memoises
transitions, so that:

- a matcher's history is a list of ints: ``rollback`` and ``fork`` cost nothing;
- the mask computation walks many tokens at once with numpy gathers over ``table`` (or in C),
  computing only the (state, byte) pairs it has never seen, a whole row at a time (`_fill_row`,
  in C where the extension `codemask.engine.native` was built).

Two bottoms exist. ``ROOT`` is the bottom of a real parse: reaching it means the input may end.
``FRAME`` is the bottom used when the mask cache analyses one rule frame in isolation: reaching
it means the frame's rule has ended and the rest belongs to whatever called it (an *exit*).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from functools import reduce
from operator import or_
from typing import Protocol, TypeVar

import numpy as np

from codemask.engine import native
from codemask.engine.automaton import RTN, distinct_rows
from codemask.engine.state_table import RESERVED_STATES, grown, unwritten_rows
from codemask.errors import GrammarError

ROOT = -1
FRAME = -2
DEAD = -1
UNKNOWN = -2
# A closure that visits more stack nodes than this is a grammar too ambiguous to parse byte by byte.
MAX_STACKS = 50_000
_ROOT_SET = (ROOT,)
_FRAME_SET = (FRAME,)


def _distinct_columns(targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`distinct_rows` of ``targets.T``; one or two stacks (the common case) key a column exactly
    by one int64, which skips the hash-and-verify."""
    if len(targets) > 2:
        return distinct_rows(targets.T)
    keys = targets[0].astype(np.int64)
    if len(targets) == 2:
        keys = (keys << 32) | (targets[1].astype(np.int64) & 0xFFFFFFFF)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


class ParserCore:
    """Interned stacks and parser states of one compiled grammar, shared by all its matchers."""

    def __init__(self, rtn: RTN, *, lazy: bool = False, like: ParserCore | None = None) -> None:
        """``like``: a core over the same automaton, whose C interner has checked its arrays already
        (for a large schema's automaton the check cost a millisecond per core)."""
        self.rtn = rtn
        self.lazy = lazy
        self.alphabet = rtn.trans.shape[1]
        self._trans = rtn.trans
        self._scanning = rtn.scanning
        # keyed by (state, *parents), where the C extension (which keeps the nodes itself) is missing
        self._node_index: dict[tuple[int, ...], int] = {}
        self.state_stacks: list[tuple[int, ...]] = []
        self.state_flag: list[bool] = []
        self._state_index: dict[tuple[tuple[int, ...], bool], int] = {}  # (without the extension)
        # a row per parser state, written as its state is interned (`unwritten_rows`)
        self.table = unwritten_rows(RESERVED_STATES, self.alphabet)
        # per parser state, as arrays for vectorised walks: the bottom flag, and whether any stack
        # still waits on input (a state with only the flag refuses every further byte)
        self.flags = np.zeros(RESERVED_STATES, dtype=bool)
        self.has_stacks = np.zeros(RESERVED_STATES, dtype=bool)
        self.lock = threading.RLock()
        self._allowed_sets: dict[int, frozenset[int]] = {}
        self._native: native.Interner | None = self._native_interner(
            checked=rtn.in_range or (like is not None and like.rtn is rtn and like._native is not None))
        # per node, its RTN state and its parents (each sorted, without repeats): Python lists
        # without the extension, read from C with it
        self.node_state: NodeRecord[int] = [] if self._native is None else NodeStates(self._native)
        self.node_parents: NodeRecord[tuple[int, ...]] = [] if self._native is None else NodeParents(self._native)
        self.initial = self.closure([self.node(int(rtn.rule_start[rtn.start_rule]), _ROOT_SET)])

    # Per RTN state, the Python forms the Python closures and the lazy core read, made on first use:
    # a byte-level core with the C interner never needs them, and for a grammar of tens of
    # thousands of states they were most of the cost of making one.

    @functools.cached_property
    def _accepting(self) -> list[bool]:
        return [bool(a) for a in self.rtn.accepting]

    @functools.cached_property
    def _calls(self) -> list[tuple[tuple[int, int, bool], ...]]:
        """Per RTN state, its calls as (callee's start state, return state, whether a tail call)."""
        call_lo, callee, ret = self.rtn.call_table
        items = list(zip(self.rtn.rule_start[callee].tolist(), ret.tolist(), self.rtn.pure_final[ret].tolist(),
                         strict=True))
        bounds = call_lo.tolist()
        return [tuple(items[bounds[q]:bounds[q + 1]]) for q in range(self.rtn.num_states)]

    @functools.cached_property
    def _scans(self) -> list[int]:
        """Per RTN state, the symbols it takes itself (a bit set)."""
        return self.rtn.scan_bits(np.arange(self.rtn.num_states))

    @functools.cached_property
    def _first_nullable(self) -> tuple[list[int], list[bool]]:
        return first_sets(self._scans, self._accepting, self._calls)

    @property
    def _first(self) -> list[int]:
        return self._first_nullable[0]

    @property
    def _nullable(self) -> list[bool]:
        return self._first_nullable[1]

    @functools.cached_property
    def _first_bits(self) -> list[int]:
        """The symbols a node can take before its frame ends: its state's own, and in a lazy core
        also those of the calls it has not expanded (0: the node never waits in a state)."""
        if not self.lazy:
            return self._scans
        first = self._first
        return [reduce(or_, (first[c] for c, _r, _t in calls), bits)
                for bits, calls in zip(self._scans, self._calls, strict=True)]

    # -- interning ---------------------------------------------------------------------------

    def node(self, state: int, parents: tuple[int, ...]) -> int:
        """The id of the stack node ``state`` on top of the nodes ``parents`` (or a bottom), a
        sorted tuple without repeats.

        Parents are tuples of ints: the garbage collector stops tracking those after their first
        collection, where a frozenset stays tracked, and with one per node every full collection
        traversed them all (a fifth of the mask time of four Python files, ad hoc). With the C
        extension the index is C's, whichever closure (C or Python) asks, and so are the nodes.
        """
        if self._native is not None:
            return self._native.node(state, parents)
        key = (state, *parents)
        found = self._node_index.get(key)
        if found is None:
            assert isinstance(self.node_state, list) and isinstance(self.node_parents, list)
            found = self._node_index[key] = len(self.node_state)
            self.node_state.append(state)
            self.node_parents.append(parents)
        return found

    def _intern_state(self, stacks: tuple[int, ...], flag: bool) -> int:
        if self._native is not None:  # (it keeps the index of the states: the Python closure, switched to, too)
            return int(self._native.intern(self, stacks, flag))
        key = (stacks, flag)
        found = self._state_index.get(key)
        if found is None:
            found = self._state_index[key] = len(self.state_stacks)
            self.state_stacks.append(stacks)
            self.state_flag.append(flag)
            if found >= len(self.table):
                self._grow()
            self.table[found] = UNKNOWN
            self.flags[found] = flag
            self.has_stacks[found] = bool(stacks)
        return found

    def _grow(self) -> None:
        """Twice the room (the rows of states not interned yet are left unwritten)."""
        size = 2 * len(self.table)
        table = grown(self.table)
        self.flags = np.concatenate([self.flags, np.zeros(size - len(self.flags), dtype=bool)])
        self.has_stacks = np.concatenate([self.has_stacks, np.zeros(size - len(self.has_stacks), dtype=bool)])
        self.table = table
        if self._native is not None:
            self._native.arrays_moved()  # (its C side holds the arrays it writes into)

    @property
    def num_states(self) -> int:
        return len(self.state_stacks)

    def _native_interner(self, *, checked: bool) -> native.Interner | None:
        """The stack nodes, `closure`, `_compute_step` and `_fill_row` in C, with the index of the
        parser states, appending each new state to this core's lists (None without the extension).
        They are never rebound, so it keeps them; ``checked``: `ParserCore`'s ``like``."""
        if not native.available():
            return None
        rtn = self.rtn
        call_lo, callee, ret = rtn.call_table
        lazy_sets: dict[str, np.ndarray] = {}
        if self.lazy:  # (a byte-level core's closures expand every call: it needs none of these)
            lazy_sets = {"waits": np.array([bool(b) for b in self._first_bits], dtype=np.uint8),
                         "nullable": np.array(self._nullable, dtype=np.uint8),
                         "first": _bit_words(self._first, self.alphabet)}
        return native.interner(
            trans=self._trans, scanning=self._scanning, accepting=rtn.accepting, call_lo=call_lo,
            callee=rtn.rule_start[callee], ret=ret, tail=rtn.pure_final[ret], state_stacks=self.state_stacks,
            state_flag=self.state_flag, max_stacks=MAX_STACKS, lazy=self.lazy, checked=checked,
            **lazy_sets)

    def native_interner(self) -> native.Interner:
        """The core's C interner (the C walks compute its transitions through it)."""
        if self._native is None:
            raise RuntimeError("this parser core has no C interner (the extension is not loaded)")
        return self._native

    # -- closure and steps -------------------------------------------------------------------

    def closure(self, stacks: list[int]) -> int:
        """Intern the parser state reached from ``stacks`` by pushing calls and popping ends.

        Returns `DEAD` when nothing is left (no stack waits on input and no bottom was reached).
        Under the core's lock: callers such as `frame_state` and `exit_state` do not hold it.
        """
        with self.lock:
            if self._native is not None and native.enabled():
                return self._native.closure(self, stacks)
            return self._closure(stacks)

    def _closure(self, stacks: list[int]) -> int:
        """`closure` in Python (without the C extension, and the tests' oracle). The order of
        every step (the pops, the parents in their sorted order, the scanning states in the order
        first met) fixes the ids of new nodes and states, and the C version follows it exactly."""
        seen: set[int] = set()
        todo = list(stacks)
        waiting: dict[int, set[int]] = {}  # RTN state -> parents of the nodes waiting there
        flag = False
        node_state, node_parents, first_bits = self.node_state, self.node_parents, self._first_bits
        push = self._push_unexpanded if self.lazy else self._push_calls
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            if len(seen) > MAX_STACKS:
                raise GrammarError(f"grammar is too ambiguous: a parser state exceeds {MAX_STACKS} stack nodes")
            q = node_state[s]
            parents = node_parents[s]
            if first_bits[q]:
                waiting.setdefault(q, set()).update(parents)
            if push(q, parents, todo):
                for parent in parents:
                    if parent < 0:
                        flag = True
                    else:
                        todo.append(parent)
        if not waiting and not flag:
            return DEAD
        merged = tuple(sorted(self.node(q, tuple(sorted(ps))) for q, ps in waiting.items()))
        return self._intern_state(merged, flag)

    def _push_calls(self, q: int, parents: tuple[int, ...], todo: list[int]) -> bool:
        """Push a node's callees, each on its return frame (or on its parents for a tail call);
        whether its frame may end here."""
        for callee_start, ret, tail in self._calls[q]:
            base = parents if tail else (self.node(ret, parents),)
            todo.append(self.node(callee_start, base))
        return self._accepting[q]

    def _push_unexpanded(self, q: int, parents: tuple[int, ...], todo: list[int]) -> bool:
        """`_push_calls` of a lazy core: calls are not expanded. A node whose state calls rules
        stays as it is and stands for everything those calls predict (its `_first_bits` are
        theirs); `_lazy_step` follows the predictions only where they take the symbol. Calls of
        rules that may match nothing are stepped over here (the state after them, or the end of
        the frame for a tail call), as a closure would pop them.

        In Python's grammar a state after an opening bracket predicts some ninety nodes (every
        level of the expression rules); a lazy step makes the twenty or so on the path to the
        symbol it takes."""
        ends = self._accepting[q]
        for callee_start, ret, tail in self._calls[q]:
            if self._nullable[callee_start]:
                if tail:
                    ends = True
                else:
                    todo.append(self.node(ret, parents))
        return ends

    def _lazy_step(self, state: int, symbol: int) -> int:
        """`_compute_step` of a lazy core: each node takes the symbol itself or through the calls
        whose first symbols include it, making the return frames on the way (see `_push_unexpanded`)."""
        moved: list[int] = []
        visited: set[tuple[int, int]] = set()
        for s in self.state_stacks[state]:
            self._descend(self.node_state[s], self.node_parents[s], -1 - s, symbol, moved, visited, True)
        return self.closure(moved) if moved else DEAD

    def _descend(self, q: int, parents: tuple[int, ...], base: int, symbol: int, moved: list[int],
                 visited: set[tuple[int, int]], top: bool) -> None:
        """Nodes moved by ``symbol`` from state ``q`` on ``parents`` and from what its calls
        predict. ``base`` names the parents (``-1 - node`` for a node's own parents, else the
        single return frame): a state met twice on the same parents is followed once. The
        states after nullable calls of a top node are nodes of the state already."""
        if (q, base) in visited:
            return
        visited.add((q, base))
        if len(visited) > MAX_STACKS:
            raise GrammarError(f"grammar is too ambiguous: a parser state exceeds {MAX_STACKS} stack nodes")
        target = int(self._trans[q, symbol])
        if target >= 0:
            moved.append(self.node(target, parents))
        bit = 1 << symbol
        for callee_start, ret, tail in self._calls[q]:
            if self._first[callee_start] & bit:
                if tail:
                    self._descend(callee_start, parents, base, symbol, moved, visited, False)
                else:
                    frame = self.node(ret, parents)
                    self._descend(callee_start, (frame,), frame, symbol, moved, visited, False)
            if not top and not tail and self._nullable[callee_start] and self._first[ret] & bit:
                self._descend(ret, parents, base, symbol, moved, visited, False)

    def step(self, state: int, symbol: int) -> int:
        """The parser state after one symbol (memoised); `DEAD` if the symbol is not allowed."""
        nxt = int(self.table[state, symbol])
        if nxt != UNKNOWN:
            return nxt
        with self.lock:
            nxt = self._compute_step(state, symbol)
            self.table[state, symbol] = nxt
        return nxt

    def _compute_step(self, state: int, symbol: int) -> int:
        if self._native is not None and native.enabled():
            return self._native.step(self, state, symbol)
        if self.lazy:
            return self._lazy_step(state, symbol)
        trans = self._trans
        moved = []
        for s in self.state_stacks[state]:
            t = int(trans[self.node_state[s], symbol])
            if t >= 0:
                moved.append(self.node(t, self.node_parents[s]))
        return self.closure(moved) if moved else DEAD

    def advance(self, states: np.ndarray, symbols: np.ndarray) -> np.ndarray:
        """Vectorised `step` for arrays of live states and symbols."""
        nxt = self.table[states, symbols]
        unknown = nxt == UNKNOWN
        if unknown.any():
            with self.lock:
                self._fill_rows(np.unique(states[unknown]).tolist())
                nxt = self.table[states, symbols]
        return nxt

    def fill_rows(self, states: np.ndarray) -> None:
        """Compute every transition of ``states`` (for walks that read ``table`` directly)."""
        with self.lock:
            self._fill_rows(states.tolist())

    def _fill_rows(self, states: list[int]) -> None:
        if self.lazy:  # (lexer mode: nothing walks a lazy core's rows; each symbol is a step)
            for st in states:
                self.table[st] = [self._compute_step(st, symbol) for symbol in range(self.alphabet)]
            return
        if self._native is not None and native.enabled():
            self._native.fill_rows(self, states)
        else:
            for st in states:
                self._fill_row(st)

    def _fill_row(self, state: int) -> None:
        """Compute every symbol's transition from ``state`` at once (in Python; see `_fill_rows`).

        Symbols that move the state's stacks to the same RTN states lead to the same parser
        state, so one closure per distinct column of the tops' transition rows suffices (a
        string's content is one column for most of the 256 bytes). The columns are visited in
        the order of their first symbol, as the C version does, so both intern the same ids.
        """
        stacks = self.state_stacks[state]
        if not stacks:
            self.table[state] = DEAD
            return
        targets = self._trans[[self.node_state[s] for s in stacks]]
        first, inverse = _distinct_columns(targets)
        order = np.argsort(first)
        outcomes = np.empty(len(first), dtype=np.int32)
        for k, column in zip(order.tolist(), targets[:, first[order]].T.tolist(), strict=True):
            moved = [self.node(t, self.node_parents[s]) for t, s in zip(column, stacks, strict=True) if t >= 0]
            outcomes[k] = self._closure(moved) if moved else DEAD
        self.table[state] = outcomes[inverse]

    def walk(self, state: int, data: bytes) -> int:
        """The state after a byte string (`DEAD` as soon as a byte is refused)."""
        for b in data:
            state = self.step(state, b)
            if state < 0:
                return DEAD
        return state

    # -- queries -----------------------------------------------------------------------------

    def can_end(self, state: int) -> bool:
        """Whether the input may end here (a real-parse state reached the bottom)."""
        return self.state_flag[state]

    def allowed_symbols(self, state: int) -> np.ndarray:
        """Boolean mask of the symbols that keep the parse alive."""
        if self.lazy:
            allowed = np.zeros(self.alphabet, dtype=bool)
            allowed[sorted(self.allowed_set(state))] = True
            return allowed
        tops = self._tops(state)
        if not tops:
            return np.zeros(self.alphabet, dtype=bool)
        return np.asarray((self._trans[tops] >= 0).any(axis=0))

    def allowed_set(self, state: int) -> frozenset[int]:
        """The symbols that keep the parse alive, as a set shared by every state that allows the
        same ones: the lexer layer asks it once per parser state (tens of thousands in a long-running
        process), where a numpy gather per state and a frozenset each were a tenth of the
        mask time of new contexts and a hundred thousand sets for the garbage collector."""
        bits = 0
        first_bits = self._first_bits
        for q in self._tops(state):
            bits |= first_bits[q]
        found = self._allowed_sets.get(bits)
        if found is None:
            found = self._allowed_sets[bits] = frozenset(i for i in range(self.alphabet) if bits >> i & 1)
        return found

    def allowed_words(self) -> np.ndarray:
        """Per RTN state, the symbols a node there can take (what `allowed_set` joins over a
        state's tops) as uint64 words, least significant first: `native.symbol_steps`' input."""
        return _bit_words(self._first_bits, self.alphabet)

    def _tops(self, state: int) -> list[int]:
        stacks = self.state_stacks[state]
        if self._native is not None:
            return self._native.states_of(stacks)
        return [self.node_state[s] for s in stacks]

    def frame_state(self, position: int) -> int:
        """The frame-local state at RTN state ``position``, for the mask cache's analysis."""
        return self.closure([self.node(position, _FRAME_SET)])

    def exit_state(self, stack: int) -> int:
        """The real-parse state after the top frame of ``stack`` ends: its callers resume."""
        parents = [p for p in self.node_parents[stack] if p >= 0]
        return self.closure(parents) if parents else DEAD


T_co = TypeVar("T_co", covariant=True)


class NodeRecord(Protocol[T_co]):
    """Per stack node id, one field: a list, or a view of the C interner's record."""

    def __getitem__(self, node: int) -> T_co: ...

    def __len__(self) -> int: ...


class NodeStates:
    """The RTN state of each node, read from the C interner (`ParserCore.node_state`)."""

    def __init__(self, interner: native.Interner) -> None:
        self._interner = interner

    def __getitem__(self, node: int) -> int:
        return self._interner.state_of(node)

    def __len__(self) -> int:
        return self._interner.num_nodes()

    def __iter__(self) -> Iterator[int]:
        return iter(self._interner.states_of(range(len(self))))


class NodeParents:
    """The parents of each node, read from the C interner (`ParserCore.node_parents`)."""

    def __init__(self, interner: native.Interner) -> None:
        self._interner = interner

    def __getitem__(self, node: int) -> tuple[int, ...]:
        return self._interner.parents_of(node)

    def __len__(self) -> int:
        return self._interner.num_nodes()

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return (self._interner.parents_of(s) for s in range(len(self)))


def _bit_words(sets: list[int], alphabet: int) -> np.ndarray:
    """Bit sets as rows of uint64 words, least significant first (the C interner's layout)."""
    words = (alphabet + 63) // 64
    return np.array([[bits >> (64 * w) & (2**64 - 1) for w in range(words)] for bits in sets],
                    dtype=np.uint64).reshape(len(sets), words)


def first_sets(scans: list[int], accepting: list[bool], calls: list[tuple[tuple[int, int, bool], ...]]
               ) -> tuple[list[int], list[bool]]:
    """Per RTN state, the symbols its frame can take next before it ends (a bit set: its own,
    its callees' first symbols, and after callees that may match nothing those of the state they
    return to), and whether its frame may end without taking any: the least fixed point, by a
    worklist over the states that make calls (a state is looked at again when a state it calls
    into or returns to grows)."""
    first, nullable = list(scans), list(accepting)
    users: dict[int, list[int]] = {}
    todo = []
    for q, q_calls in enumerate(calls):
        if q_calls:
            todo.append(q)
            for callee_start, ret, _tail in q_calls:
                users.setdefault(callee_start, []).append(q)
                users.setdefault(ret, []).append(q)
    while todo:
        q = todo.pop()
        bits, ends = first[q], nullable[q]
        for callee_start, ret, _tail in calls[q]:
            bits |= first[callee_start]
            if nullable[callee_start]:
                bits |= first[ret]
                ends = ends or nullable[ret]
        if bits != first[q] or ends != nullable[q]:
            first[q], nullable[q] = bits, ends
            todo.extend(users.get(q, ()))
    return first, nullable

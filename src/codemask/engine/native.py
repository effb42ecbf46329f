"""The C trie walks, residual walk and parser closures (`codemask.engine._native`, built by setup.py
where a C compiler exists).

The first visit of a wide position walks most of the vocabulary's trie; in numpy that is a few dozen
array steps per trie level and 5–50 ms, in C one depth-first loop and well under a millisecond. The
transitions the walk meets first are computed by `ParserCore._fill_row`, one closure per distinct
column of a state's transition rows, which is most of what is left of a grammar's compilation and of
the slow decoding steps; in C it keeps the stack nodes and the index of the parser states, and
appends each new state to the core's own Python lists (`Interner`). Lexer mode has its own: the
lexer's transitions, its trie scan for a new lexer state and its residual walk (`LexerStepper`), the
parser state after a lexeme and a state's fresh lexer state (`SymbolSteps`), and the recursion over
residual sets (`ResidualWalker`). The extension is optional: without it (no compiler when installed,
or a build older than this source) the numpy walk in `trie_walk` and the Python parser run instead,
with the same results (the tests compare the two). ``CODEMASK_NATIVE=0`` turns it off."""

from __future__ import annotations

import functools
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from codemask.engine.token_trie import FlatTrie, PreorderTrie, TokenTrie

if TYPE_CHECKING:  # parser imports this module
    from codemask.engine.automaton import RTN
    from codemask.engine.lexer import LexerCore, TerminalAutomata
    from codemask.engine.parser import ParserCore
    from codemask.grammar.ir import Expr

# The C module's VERSION this source expects (bump both together when the interface changes).
EXPECTED_VERSION = 33


def _load() -> ModuleType | None:
    try:
        from codemask.engine import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    if getattr(_native, "VERSION", None) != EXPECTED_VERSION:
        warnings.warn("codemask.engine._native is out of date (reinstall codemask to rebuild it); "
                      "masks are computed with numpy and Python", RuntimeWarning, stacklevel=2)
        return None
    return _native


_MODULE = _load()
_enabled = _MODULE is not None and os.environ.get("CODEMASK_NATIVE", "1") != "0"


def enabled() -> bool:
    """Whether mask computations use the C walk and parsers the C closures."""
    return _enabled


def available() -> bool:
    """Whether the extension was built and loaded (enabled or not)."""
    return _MODULE is not None


@contextmanager
def using(native: bool) -> Iterator[None]:
    """Use the C walk and closures (if available) or the numpy and Python ones inside the block (tests
    compare them)."""
    global _enabled
    before = _enabled
    _enabled = native and _MODULE is not None
    try:
        yield
    finally:
        _enabled = before


class Interner(Protocol):
    """`_native.Interner`: the stack nodes of one `ParserCore`, `ParserCore.closure` and
    `ParserCore._fill_row` in C."""

    def node(self, state: int, parents: tuple[int, ...]) -> int: ...

    def closure(self, core: ParserCore, stacks: Sequence[int]) -> int: ...

    def intern(self, core: ParserCore, stacks: tuple[int, ...], flag: bool) -> int: ...

    def fill_rows(self, core: ParserCore, states: Sequence[int]) -> None: ...

    def step(self, core: ParserCore, state: int, symbol: int) -> int: ...

    def arrays_moved(self) -> None: ...

    def state_of(self, node: int) -> int: ...

    def parents_of(self, node: int) -> tuple[int, ...]: ...

    def states_of(self, nodes: Iterable[int]) -> list[int]: ...

    def num_nodes(self) -> int: ...


def interner(*, trans: np.ndarray, scanning: np.ndarray, accepting: np.ndarray, call_lo: np.ndarray,
             callee: np.ndarray, ret: np.ndarray, tail: np.ndarray, state_stacks: list[tuple[int, ...]],
             state_flag: list[bool], max_stacks: int,
             lazy: bool = False, waits: np.ndarray | None = None, nullable: np.ndarray | None = None,
             first: np.ndarray | None = None, checked: bool = False) -> Interner | None:
    """The C stack nodes and closures over a core's RTN (``trans``, per-state ``scanning`` and
    ``accepting``, and its calls as ``callee[k]``, ``ret[k]``, ``tail[k]`` for ``k`` in
    ``call_lo[q]:call_lo[q+1]``) that keep the stack nodes and the index of the parser states
    themselves and append each new state to the core's (empty) state lists, which it keeps (None
    without the extension). A ``lazy`` core's closures
    leave calls unexpanded (`ParserCore._push_unexpanded`): per RTN state, whether a node there
    ``waits`` on input, whether its frame is ``nullable`` and its ``first`` symbols, a uint64
    bit set of ``ceil(alphabet / 64)`` words. ``checked``: these arrays passed an earlier
    interner's bounds check (every transition and call in range), which is then not repeated."""
    if _MODULE is None:
        return None
    ints = [np.ascontiguousarray(a, dtype=np.int32) for a in (trans, call_lo, callee, ret)]
    flags = [np.ascontiguousarray(a, dtype=np.uint8) for a in (scanning, accepting, tail)]
    states, words = len(scanning), (trans.shape[1] + 63) // 64
    lazy_arrays = [np.ascontiguousarray(a if a is not None else np.zeros(size, dtype), dtype=dtype)
                   for a, size, dtype in ((waits, states, np.uint8), (nullable, states, np.uint8),
                                          (first, (states, words), np.uint64))]
    found: Interner = _MODULE.Interner(ints[0], trans.shape[1], flags[0], flags[1], ints[1], ints[2], ints[3],
                                       flags[2], state_stacks, state_flag, max_stacks, lazy,
                                       *lazy_arrays, checked)
    return found


def walk(core: ParserCore, flat: FlatTrie, nodes: np.ndarray, states: np.ndarray,
         owners: np.ndarray) -> list[np.ndarray]:
    """Consume trie nodes ``nodes`` (flat ids) from parser ``states`` and everything below them.

    Returns int32 arrays: ok (owner, sorted token), exit (owner, token range lo, hi, depth).
    Transitions the table does not know yet are computed between rounds of the C walk.
    """
    assert _MODULE is not None
    parts: list[tuple[np.ndarray, ...]] = []
    nodes, states, owners = (np.ascontiguousarray(a, dtype=np.int32) for a in (nodes, states, owners))
    while len(nodes):
        with core.lock:  # the table only grows under the lock; read a consistent one
            found = _MODULE.walk(core.table, core.alphabet, core.flags, core.has_stacks, flat.byte, flat.lo,
                                 flat.hi, flat.token, flat.child_lo, flat.child_hi, flat.depth, nodes, states,
                                 owners)
        arrays = tuple(np.frombuffer(b, dtype=np.int32) for b in found)
        parts.append(arrays[:6])
        nodes, states, owners = arrays[6:]
        if len(nodes):
            core.fill_rows(np.unique(states))
    return [np.concatenate([p[i] for p in parts]) for i in range(6)]


class PositionWalker(Protocol):
    """`_native.PositionWalker`: one vocabulary's trie for classifying byte-level positions in C."""

    @property
    def memo_entries(self) -> int: ...

    @property
    def memo_shared_hits(self) -> int: ...

    @property
    def memo_shapes(self) -> int: ...

    def clear_memo(self) -> None: ...

    def classify(self, interner: Interner, core: ParserCore, start: int, follow: bytes | None,
                 max_uncertain: int, use_memo: bool) -> tuple[bytes, ...] | tuple[bytes, None]: ...

    def resolve(self, interner: Interner, core: ParserCore, start: int, residual_rows: np.ndarray,
                residual_starts: np.ndarray, residual_lengths: np.ndarray, token_ids: np.ndarray,
                residual_of: np.ndarray, words: np.ndarray) -> None: ...


_WALKERS: dict[int, tuple[TokenTrie, PositionWalker]] = {}
_WALKERS_LOCK = threading.Lock()


def position_walker(trie: TokenTrie, vocab_size: int) -> PositionWalker:
    """The trie's `PositionWalker` for bitmask rows of ``vocab_size`` tokens (made once per trie and
    size: it checks the trie's arrays, 274,000 nodes for Llama-3, when made). The extension must be
    loaded."""
    module = _loaded()
    key = id(trie) ^ (vocab_size << 48)
    with _WALKERS_LOCK:
        found = _WALKERS.get(key)
        if found is not None and found[0] is trie:
            return found[1]
    pre = trie.preorder
    row_start, ids = trie.suffix_ids
    walker: PositionWalker = module.PositionWalker(
        pre.byte, pre.depth, pre.lo, pre.hi, pre.token, pre.end, np.ascontiguousarray(trie.order, dtype=np.int32),
        np.ascontiguousarray(trie.lengths, dtype=np.int32), np.ascontiguousarray(row_start, dtype=np.int64),
        np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(trie.matrix, dtype=np.uint8),
        trie.matrix.shape[1], (vocab_size + 31) // 32)
    with _WALKERS_LOCK:
        _WALKERS[key] = (trie, walker)
    return walker


def classify_position(walker: PositionWalker, core: ParserCore, start: int, follow: bytes | None,
                      max_uncertain: int, use_memo: bool = False
                      ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
    """A byte-level position's accepted tokens (a uint32 bitmask row over token ids, read-only) and
    uncertain tokens, from its frame-local parser state ``start`` (`ParserCore.frame_state`):
    int32 arrays of their trie rows and the distinct residual each goes on with, and per residual
    the row it is a tail of, where it starts and its length; None instead where more than
    ``max_uncertain`` tokens leave the frame. ``follow`` (256 bytes of 0/1) are the bytes a
    residual may begin with, None where the frame has no caller. With ``use_memo`` the walker keeps the walks
    below first bytes that lead many tokens to one parser state, by the shape of the automaton
    that state reaches, for the later positions of any grammar that reach a state of the same
    shape (the branches of every key complement go on as one free string, say). Transitions the core does not know
    yet are computed on the way, under its lock."""
    interner = core.native_interner()
    with core.lock:
        found = walker.classify(interner, core, start, follow, max_uncertain, use_memo)
    words = np.frombuffer(found[0], dtype=np.uint32)
    parts = found[1:]
    if parts[0] is None:
        return words, None
    return words, tuple(np.frombuffer(part, dtype=np.int32) for part in parts if part is not None)


def state_mask(walker: PositionWalker, core: ParserCore, state: int) -> np.ndarray:
    """The vocabulary's tokens a real parse's ``state`` accepts, as a uint32 bitmask row over token
    ids (read-only; stop tokens aside): one scan of the trie from the state itself."""
    interner = core.native_interner()
    with core.lock:
        found = walker.classify(interner, core, state, None, 0, False)
    return np.frombuffer(found[0], dtype=np.uint32)


def resolve_residuals(walker: PositionWalker, core: ParserCore, start: int, residual_rows: np.ndarray,
                      residual_starts: np.ndarray, residual_lengths: np.ndarray, token_ids: np.ndarray,
                      residual_of: np.ndarray, words: np.ndarray) -> None:
    """Set in the uint32 bitmask row ``words`` (in place) the bits of the uncertain ``token_ids``
    whose residual (``residual_of``: tails of the trie's rows) the core accepts from state ``start``
    (`uncertain.resolve_residuals` in C)."""
    interner = core.native_interner()
    with core.lock:
        walker.resolve(interner, core, start, residual_rows, residual_starts, residual_lengths, token_ids,
                       residual_of, _bitmask_row(words))


def follow_bytes(rtn: RTN) -> np.ndarray:
    """`RTN.follow_bytes` in C: ``[rules, 256]`` bool. The extension must be loaded."""
    call_lo, callee, ret = rtn.call_table
    arrays = [np.ascontiguousarray(a, dtype=dtype) for a, dtype in (
        (rtn.trans, np.int32), (rtn.accepting, np.uint8), (call_lo, np.int64), (callee, np.int32), (ret, np.int32),
        (rtn.rule_start, np.int32), (rtn.state_rule, np.int32))]
    found = _loaded().follow_bytes(*arrays, len(rtn.rule_names), rtn.first_bytes)
    return np.frombuffer(found, dtype=np.uint8).reshape(len(rtn.rule_names), 256).astype(bool)


def rule_graph(owner: np.ndarray, callee: np.ndarray, tail: np.ndarray, sizes: np.ndarray,
               limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`RTN.rule_calls` in C, from per call its calling rule, callee and whether it is a tail call,
    and per rule its states: ``(callee_lo, callees, unshared, with_callers)`` as in
    `automaton.RuleCalls`. The extension must be loaded."""
    arrays = [np.ascontiguousarray(a, dtype=dtype) for a, dtype in (
        (owner, np.int32), (callee, np.int32), (tail, np.uint8), (sizes, np.int32))]
    lo, callees, unshared, with_callers = _loaded().rule_graph(*arrays, limit)
    flags = [np.frombuffer(found, dtype=np.uint8).astype(bool) for found in (unshared, with_callers)]
    return np.frombuffer(lo, dtype=np.int32), np.frombuffer(callees, dtype=np.int32), flags[0], flags[1]


def dfa_of_expr(expr: Expr, rule_index: dict[str, int], terminal_index: dict[str, int] | None, alphabet: int,
                max_nfa_states: int, max_dfa_states: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """The minimal DFA of the Thompson NFA of a grammar expression, made in C from the expression itself
    (`automaton.NFABuilder`'s construction; GrammarError past ``max_nfa_states``, OverflowError
    past ``max_dfa_states``), as `automaton.minimize(trim(determinize(...)))` numbers it: its
    transitions as runs (int32 [k, 3]: lo, hi, target; state ``s``'s are rows ``run_lo[s]`` to
    ``run_lo[s + 1]``, int32 [n + 1]), accepting states (bool [n]), calls (int32 [k, 3]: state,
    rule, target, by state then rule) and each state's symbols (`DFA.first_bytes`). The extension
    must be loaded."""
    runs, run_lo, accepting, call_list, first = _ir_module().dfa_of_expr(expr, rule_index, terminal_index, alphabet,
                                                                         max_nfa_states, max_dfa_states)
    count = len(accepting)
    return (np.frombuffer(runs, dtype=np.int32).reshape(-1, 3),
            np.frombuffer(run_lo, dtype=np.int32),
            np.frombuffer(accepting, dtype=np.uint8).astype(bool),
            np.frombuffer(call_list, dtype=np.int32).reshape(-1, 3),
            np.frombuffer(first, dtype=np.uint64).reshape(count, -1))


def expr_digest(expr: Expr, rule_index: dict[str, int]) -> bytes:
    """A 128-bit digest of a grammar expression with its rule references read as their indices in
    ``rule_index`` (-1 where absent): what a byte-level rule's automaton depends on, the key of the
    automaton cache. The extension must be loaded."""
    digest: bytes = _ir_module().expr_digest(expr, rule_index)
    return digest


def least_fixed_point(bodies: list[Expr], rule_index: dict[str, int], nullable: bool) -> bytes:
    """`optimize._least_fixed_point` in C: per rule (``bodies`` in the order of ``rule_index``), 1
    where it derives a finite string (or, ``nullable``, the empty one). The extension must be loaded."""
    found: bytes = _ir_module().least_fixed_point(bodies, rule_index, nullable)
    return found


def stack_tables(tables: list[np.ndarray | tuple[np.ndarray, np.ndarray]], out: np.ndarray) -> np.ndarray:
    """``tables`` written end to end into ``out`` with each table's first row number added to its
    targets, in one pass in C; returns per row of ``out`` whether it has a transition (bool). A table
    is either dense (int32 ``[rows, width]``, targets numbered within their own, -1 none) or the runs
    `dfa_of_expr` makes, ``(runs, run_lo)``. IndexError where a target is neither -1 nor one of its
    table's rows (so the stacked table's are all in range: `RTN.in_range`). The extension must be
    loaded."""
    width = out.shape[1]
    flags: bytes = _loaded().stack_tables([_int32_table(t) for t in tables], width, out)
    return np.frombuffer(flags, dtype=bool)


def _int32_table(table: np.ndarray | tuple[np.ndarray, np.ndarray]) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    if isinstance(table, tuple):
        runs, run_lo = table
        return np.ascontiguousarray(runs, dtype=np.int32), np.ascontiguousarray(run_lo, dtype=np.int32)
    return np.ascontiguousarray(table, dtype=np.int32)


def strongly_connected(edges: list[list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components of the graph whose node ``i`` has the edges
    ``edges[i]``, in C (`optimize._strongly_connected`). The extension must be loaded."""
    found: list[list[int]] = _ir_module().strongly_connected(edges)
    return found


def rule_uses(expr: Expr, uses: dict[str, int]) -> None:
    """`optimize._count_uses` in C (counts past 2**60 saturate). The extension must be loaded."""
    _ir_module().rule_uses(expr, uses)


def expr_size(expr: Expr, inlined: dict[str, tuple[int, int, type]]) -> tuple[int, int, type]:
    """`optimize.expr_size` in C (weights past 2**60 saturate). The extension must be loaded."""
    size: tuple[int, int, type] = _ir_module().expr_size(expr, inlined)
    return size


def left_calls(expr: Expr, nullable: set[str] | frozenset[str]) -> set[str]:
    """`optimize.left_calls` in C. The extension must be loaded."""
    found: set[str] = _ir_module().left_calls(expr, nullable)
    return found


def largest_repeat_bound(expr: Expr) -> int:
    """The largest bound (min or max) of a repetition in ``expr``, 0 if it has none. The extension
    must be loaded."""
    bound: int = _ir_module().largest_repeat_bound(expr)
    return bound


def expr_names(expr: Expr) -> tuple[frozenset[str], frozenset[str]] | None:
    """The rules and the terminals ``expr`` references, walked in C (`grammar.ir.references` uses
    it); None where the extension is off."""
    if not _enabled:
        return None
    found: tuple[frozenset[str], frozenset[str]] = _ir_module().expr_names(expr)
    return found


def substitute(expr: Expr, replacements: dict[str, Expr]) -> Expr:
    """``expr`` with each reference to a rule named in ``replacements`` replaced by its expression
    (`optimize._substitute`), walked in C and rebuilt with the IR's builders where anything changed.
    The extension must be loaded."""
    from codemask.grammar import ir

    made: Expr = _ir_module().substitute(expr, replacements, ir.seq, ir.choice, ir.Repeat, ir.NOTHING)
    return made


def expr_text(expr: Expr) -> str:
    """`grammar.ir.to_text` of a grammar expression, made in C. The extension must be loaded."""
    text: str = _ir_module().expr_text(expr)
    return text


@functools.cache
def _ir_module() -> ModuleType:
    """The C module, told the grammar IR's classes (once)."""
    from codemask.errors import GrammarError
    from codemask.grammar import ir

    module = _loaded()
    module.set_ir((ir.Literal, ir.CharClass, ir.ByteClass, ir.RuleRef, ir.TerminalRef, ir.Sequence, ir.Choice,
                   ir.Repeat), GrammarError)
    return module


class LexerStepper(Protocol):
    """`_native.LexerStepper`: `LexerCore._compute` in C, and the walks that compute transitions
    on the way (see `lexer_walk` and `lexer_residuals`)."""

    def compute(self, core: LexerCore, state: int, byte: int) -> int: ...

    def walk(self, core: LexerCore, byte: np.ndarray, depth: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             token: np.ndarray, end: np.ndarray, lid: int, match_depth: int, match_class: int) -> tuple[bytes, ...]: ...

    def residuals(self, core: LexerCore, matrix: np.ndarray, width: int, rows: np.ndarray, starts: np.ndarray,
                  lengths: np.ndarray, lid: int, loops: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes]: ...


def lexer_stepper(automata: TerminalAutomata, *, newline: int, poison: int, keys: list[Any], index: dict[Any, int],
                  next_column: Callable[[Any, int], Any]) -> LexerStepper | None:
    """The C transitions of a lexer over ``automata`` that look keys up in its ``keys`` and ``index``
    (which it keeps) and intern new ones through the core passed to each call (None without the
    extension). ``next_column`` is `indentation.next_column`, called for newline lexemes."""
    if _MODULE is None:
        return None
    retypes = [[s for s, _embedded in terms] for terms in automata.unless]
    retype_lo = np.concatenate([[0], np.cumsum([len(r) for r in retypes])]).astype(np.int32)
    retype = np.array([s for r in retypes for s in r], dtype=np.int32)
    found: LexerStepper = _MODULE.LexerStepper(
        np.ascontiguousarray(automata.trans, dtype=np.int32), np.ascontiguousarray(automata.accepting, dtype=np.uint8),
        np.ascontiguousarray(automata.terminal_of, dtype=np.int32), np.ascontiguousarray(automata.rank, dtype=np.int32),
        retype_lo, retype, newline, poison, keys, index, next_column)
    return found


def lexer_walk(lexer: LexerCore, trie: PreorderTrie, lid: int, match_depth: int, match_class: int
               ) -> list[np.ndarray]:
    """Walk every token of the trie from lexer state ``lid`` (whose last match, if the lexeme
    already matched, is at ``match_depth`` 0 as ``match_class``; -1, -1 if not) with the lexer's
    longest match.

    Returns int32 arrays: accepted (sorted token), exit (token range lo, hi, match depth, match
    class), blocked (token range lo, hi). Transitions the table does not know yet are computed
    on the way (`LexerStepper`).
    """
    stepper = lexer.native_stepper()
    with lexer.lock:  # transitions are computed and recorded under the lexer's lock
        found = stepper.walk(lexer, trie.byte, trie.depth, trie.lo, trie.hi, trie.token, trie.end, lid,
                             match_depth, match_class)
    return [np.frombuffer(b, dtype=np.int32) for b in found]


def lexer_residuals(lexer: LexerCore, matrix: np.ndarray, rows: np.ndarray, starts: np.ndarray,
                    lengths: np.ndarray, lid: int, loops: frozenset[int] = frozenset()
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, np.ndarray]]]:
    """Walk the residuals ``matrix[rows, starts:starts + lengths]`` from lexer state ``lid`` with
    longest match (`lexer_masks.ResidualSets.split`); a lexeme that ends as one of the end
    classes ``loops`` is followed by a new one from ``lid`` in the same walk.

    Returns, per residual: alive at its end (bool), the offset just after the last match of its
    last lexeme (int32, 0: none, or refused as a reserved word) and that match's end class
    (int32, -1: none); and the residuals whose lexeme ended inside them (dead at the end with a
    match) by that end class, as `lexer_masks._grouped` gives them: (end class, int32 members in
    order), classes increasing. Transitions the table does not know yet are computed on the way
    (`LexerStepper`).
    """
    mask = np.zeros(max(loops, default=-1) + 1, dtype=np.uint8)
    mask[list(loops)] = 1
    stepper = lexer.native_stepper()
    rows32, starts32, lengths32 = (np.ascontiguousarray(a, dtype=np.int32) for a in (rows, starts, lengths))
    matrix = np.ascontiguousarray(matrix, dtype=np.uint8)
    with lexer.lock:
        alive, end_at, end_class, ended, bounds = stepper.residuals(lexer, matrix, matrix.shape[1], rows32, starts32,
                                                                    lengths32, lid, mask.tobytes())
    members = np.frombuffer(ended, dtype=np.int32)
    firsts = np.frombuffer(bounds, dtype=np.int32).reshape(-1, 2).tolist()
    stops = [start for _cls, start in firsts[1:]] + [len(members)] * bool(firsts)
    groups = [(cls, members[start:stop]) for (cls, start), stop in zip(firsts, stops, strict=True)]
    return (np.frombuffer(alive, dtype=bool), np.frombuffer(end_at, dtype=np.int32),
            np.frombuffer(end_class, dtype=np.int32), groups)


def _loaded() -> ModuleType:
    """The C module, or a clear error where a caller needs it and it is not loaded."""
    if _MODULE is None:
        raise RuntimeError("codemask.engine._native is not loaded (no C compiler at install, or CODEMASK_NATIVE=0)")
    return _MODULE


def _bitmask_row(words: np.ndarray) -> np.ndarray:
    """``words`` if it is a uint32 bitmask row (the C loops index it by 32-bit words)."""
    if not isinstance(words, np.ndarray) or words.dtype != np.uint32 or words.ndim != 1:
        raise TypeError(f"expected a 1-d uint32 bitmask row, got {getattr(words, 'dtype', type(words).__name__)}")
    return words


def set_bits_where(words: np.ndarray, tokens: bytes, offsets: bytes, ok: bytes | bytearray | np.ndarray,
                   group: bytes = b"") -> None:
    """Set, in the uint32 bitmask row ``words`` (in place), the bits of the tokens of every
    residual ``r`` whose ``ok[r]`` is set (0/1 bytes, or bools): residual ``r``'s tokens are
    ``tokens[offsets[r]:offsets[r + 1]]`` (int32 bytes, `lexer_masks.UncertainTokens.by_residual`).
    ``group``, the packed bits of all the tokens (b"": none), lets a mostly accepted group be set
    whole, less the refused. The extension must be loaded (`bitmask.set_bits` is the numpy way)."""
    _loaded().set_bits_where(_bitmask_row(words), tokens, offsets, ok, group)


def pack_rows(words: np.ndarray, order: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
    """Set, in the uint32 bitmask row ``words`` (in place), the bit of token ``order[row]`` for
    every trie row in each range ``lo[i]:hi[i]``. The extension must be loaded."""
    _loaded().pack_rows(_bitmask_row(words), np.ascontiguousarray(order, dtype=np.int32),
                        np.ascontiguousarray(lo, dtype=np.int64), np.ascontiguousarray(hi, dtype=np.int64))


def json_string_chars(matrix: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row of the trie's byte ``matrix`` (``lengths`` bytes each): twice the JSON string
    characters the token begins before its first unescaped quote, plus one if it has that quote
    (`string_chains.json_string_chars`). The extension must be loaded."""
    matrix = np.ascontiguousarray(matrix, dtype=np.uint8)
    out = _loaded().json_string_chars(matrix, matrix.shape[1], np.ascontiguousarray(lengths, dtype=np.int32))
    return np.frombuffer(out, dtype=np.int32)


def string_counts(trans: np.ndarray, accepting: np.ndarray, call_lo: np.ndarray, callee: np.ndarray, ret: np.ndarray,
                  lengths: np.ndarray, lo: int, hi: int, start: int, free_trans: np.ndarray,
                  free_accepting: np.ndarray, content: int, closing: bool) -> np.ndarray | None:
    """`string_chains.string_counts` in C: per state of the rule ``lo``..``hi``, its fewest and most
    characters (int32 pairs, -1 where not counted), or None. The extension must be loaded."""
    def flags(array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array, dtype=np.uint8)

    def ints(array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array, dtype=np.int32)

    out = _loaded().string_counts(ints(trans), flags(accepting), np.ascontiguousarray(call_lo, dtype=np.int64),
                                  ints(callee), ints(ret), ints(lengths), lo, hi, start, ints(free_trans),
                                  flags(free_accepting), content, closing)
    return None if out is None else np.frombuffer(out, dtype=np.int32)


def json_char_ends(matrix: np.ndarray, lengths: np.ndarray, rows: np.ndarray, chars: int) -> np.ndarray:
    """Per trie row of ``rows``: the byte where its token's content goes on past ``chars`` JSON
    string characters, or -1 (`string_chains.json_char_ends`). The extension must be loaded."""
    matrix = np.ascontiguousarray(matrix, dtype=np.uint8)
    out = _loaded().json_char_ends(matrix, matrix.shape[1], np.ascontiguousarray(lengths, dtype=np.int32),
                                   np.ascontiguousarray(rows, dtype=np.int64), chars)
    return np.frombuffer(out, dtype=np.int32)


def distinct(slots: np.ndarray, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(numbers, return_index=True, return_inverse=True)`` for dense non-negative
    numbers, in C through the scratch int32 table ``slots`` (one entry per possible number; its
    contents are left undefined): the sorted distinct numbers, the position of one occurrence of
    each (any: equal numbers are equal residuals), and which one each number is. The extension
    must be loaded."""
    keys, chosen, group = _loaded().distinct(slots, np.ascontiguousarray(numbers, dtype=np.int64))
    return (np.frombuffer(keys, dtype=np.int64), np.frombuffer(chosen, dtype=np.int32),
            np.frombuffer(group, dtype=np.int64))


class SymbolSteps(Protocol):
    """`_native.SymbolSteps`: `LexParserCore.after` and `LexParserCore.fresh` in C for the common cases."""

    def after(self, pid: int, end_class: int) -> int: ...

    def fresh(self, pid: int) -> int: ...

    def stats(self) -> tuple[int, int]: ...


def symbol_steps(*, parser: ParserCore, kinds: np.ndarray, end_classes: list[Any], keys: list[Any] | None,
                 index: dict[Any, int] | None, key_lock: Any, indent: int, dedent: int, newline: int,
                 after: Callable[[int, int], int], fresh: Callable[[int], int]) -> SymbolSteps | None:
    """The lexer layer's parser side in C over ``parser`` (which must have its C interner): per
    terminal its ``kinds`` (`SYMBOL_KINDS` flags), the lexer's ``end_classes`` list, and under
    Python's indentation tracker its ``keys`` list, ``index`` dict and ``key_lock`` (None, None,
    None without one) and its ``indent``, ``dedent`` and ``newline`` terminals (-1: none). Cases it
    does not handle go to ``after(pid, end class)`` and ``fresh(pid) -> lexer state`` (None
    without the extension)."""
    if _MODULE is None or getattr(parser, "_native", None) is None:
        return None
    kinds = np.ascontiguousarray(kinds, dtype=np.uint8)
    found: SymbolSteps = _MODULE.SymbolSteps(parser, parser.allowed_words(), kinds, end_classes, keys, index,
                                             key_lock, indent, dedent, newline, after, fresh)
    return found


# `symbol_steps`' per-terminal flags (the C file's K_* constants)
SYMBOL_KINDS = {"ignored": 1, "newline": 2, "opening": 4, "closing": 8, "def": 16, "line_join": 32}


class ResidualWalker(Protocol):
    """`_native.ResidualWalker`: `LexerMaskComputer._residuals_accepted` in C, whose results are
    numbered by content (equal flags, one number), so that a caller can key what it derives from
    them by their numbers."""

    @property
    def result_bytes(self) -> int: ...

    def result(self, pid: int, residuals: Any) -> int: ...

    def flags(self, result: int) -> bytes: ...

    def clear(self) -> None: ...


def residual_walker(*, steps: SymbolSteps, split: Callable[[Any, int, frozenset[int]], Any],
                    limit: int) -> ResidualWalker | None:
    """The residual recursion in C over ``steps`` (`symbol_steps`: the parser state after a lexeme
    and a state's fresh lexer state, both memoised in C: they must be functions of their
    arguments) and ``split(residuals, lid, loops) -> ResidualSplit``, which must return one object
    per (residuals, lid, loops) whose fields never change, as `ResidualSets.split` does (the walker
    keeps what it read of each split, by its identity); results per (parser state, set) in two
    generations of ``limit`` entries, as numbers of distinct results (``result``; their flags by
    ``flags``, a byte of 0/1 per member of the set), hash-consed: a result merged from a split and
    its children's results is remembered by them, so that another parser context whose lexemes
    lead to the same results copies and merges nothing. Results are kept until ``clear`` (their
    size: ``result_bytes``), which must not run while a caller holds numbers it will still use.
    None without the extension."""
    if _MODULE is None:
        return None
    if limit < 1:
        raise ValueError(f"limit must be at least 1 result a generation, got {limit}")
    found: ResidualWalker = _MODULE.ResidualWalker(steps, split, limit)
    return found


if _MODULE is not None:  # (`references` is asked of every rule several times per compile)
    from codemask.grammar import ir as _ir

    _ir.use_names_walk(expr_names)
    if _enabled:  # (the same nodes either way: ``CODEMASK_NATIVE=0`` leaves them to Python)
        _ir.use_builders(_ir_module().ir_seq, _ir_module().ir_choice)

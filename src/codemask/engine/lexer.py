"""Lexer-mode matching: a longest-match contextual lexer under the RTN parser, byte by byte.

Lark grammars are defined over *terminals* matched by a lexer, not over bytes: at each point the
lexer considers the terminals the parser can accept next (plus ignored ones), takes the longest
match, breaks ties by rank, and hands the terminal to the parser. A string the lexer splits
differently is a different string, so a byte-level engine must reproduce those semantics exactly.

The combined state is an ordered tuple of *configurations* ``(parser state, lexer state)``. The
first is the current lexeme being extended; the others are fallbacks: where the current lexeme
last matched a terminal and then kept going through non-matching bytes, the fallback is "that
terminal ended there, and these bytes started the next lexeme". A fallback only matters if the
current lexeme dies before matching again (longest match), so it is dropped as soon as the
current lexeme matches at a longer length. Lexing is deterministic, so in steady state there is a
single configuration.

Lexer states are sets of live terminal-automaton states (one automaton per terminal, numbered
globally), interned like parser states; all transitions are memoised in numpy tables so token
walks are vectorised exactly as in byte mode.

Python-style grammars (``%declare _INDENT _DEDENT``) put an indentation tracker between lexer
and parser (:mod:`codemask.engine.indentation`): the newline lexeme's lexer states also carry the
indentation measured so far, and parser states carry brackets and indentation levels. Reserved
words (``Terminal.reserved``) are always candidates beside the regex terminals that retype to
them, so an identifier that spells a keyword is that keyword wherever it appears.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from codemask.engine import native
from codemask.engine.automaton import BYTE_ALPHABET, compile_expr
from codemask.engine.indentation import (
    IndentingParser,
    IndentSpec,
    Measured,
    SymbolParser,
    indent_spec,
    next_column,
)
from codemask.engine.parser import DEAD, UNKNOWN, ParserCore
from codemask.engine.state_table import grown, unwritten_rows
from codemask.errors import GrammarError
from codemask.grammar.ir import Terminal

Config = tuple[int, int]  # (parser state, lexer state)


@dataclass
class TerminalAutomata:
    """Every terminal's byte DFA in one global numbering, plus how the lexer chooses between them."""

    trans: np.ndarray  # [S, 256] int32
    accepting: np.ndarray  # [S] bool
    terminal_of: np.ndarray  # [S] int32
    start_of: np.ndarray  # [T] int32
    rank: np.ndarray  # [T] int32: the order in which the lexer tries terminals (lower first)
    unless: list[tuple[tuple[int, bool], ...]]  # per terminal: (string terminal, embedded) retypes
    names: list[str]
    ignore: frozenset[int]
    reserved: frozenset[int] = frozenset()  # string terminals that are reserved words

    @property
    def indentation(self) -> IndentSpec | None:
        """The indentation set-up, when the grammar declares Python-style indentation."""
        return indent_spec(self.names)


def automata_digest(automata: TerminalAutomata) -> str:
    """A digest of everything the lexer's states and transitions are computed from: a saved
    `LexerMaskState` is only read by a lexer over the same automata (the lexer states it holds are
    numbered over them)."""
    digest = hashlib.sha256()
    for array in (automata.trans, automata.accepting, automata.terminal_of, automata.start_of, automata.rank):
        digest.update(np.ascontiguousarray(array).tobytes() + str(array.dtype).encode())
    digest.update(repr((automata.unless, automata.names, sorted(automata.ignore),
                        sorted(getattr(automata, "reserved", ())))).encode())
    return digest.hexdigest()


def build_terminal_automata(terminals: list[Terminal], ignore: set[str]) -> TerminalAutomata:
    """Compile each terminal's regular expression to a DFA and number them globally."""
    parts, accepting, owners, starts = [], [], [], []
    offset = 0
    for t, term in enumerate(terminals):
        dfa = compile_expr(term.body, {}, BYTE_ALPHABET)
        if dfa.accepting[dfa.start]:
            raise GrammarError(f"terminal {term.name!r} matches the empty string, which a lexer cannot use")
        trans = np.where(dfa.trans >= 0, dfa.trans + offset, -1).astype(np.int32)
        if term.shortest:
            trans[dfa.accepting] = -1  # a lazy terminal's match ends where it first can
        parts.append(trans)
        accepting.append(dfa.accepting)
        owners.append(np.full(len(dfa.accepting), t, dtype=np.int32))
        starts.append(offset + dfa.start)
        offset += len(dfa.accepting)
    order = sorted(range(len(terminals)), key=lambda i: (terminals[i].order, terminals[i].name))
    rank = np.empty(len(terminals), dtype=np.int32)
    rank[order] = np.arange(len(terminals), dtype=np.int32)
    names = [t.name for t in terminals]
    index = {name: i for i, name in enumerate(names)}
    unless = [tuple((index[s], embedded) for s, embedded in t.unless if s in index) for t in terminals]
    return TerminalAutomata(
        trans=np.concatenate(parts) if parts else np.zeros((0, BYTE_ALPHABET), dtype=np.int32),
        accepting=np.concatenate(accepting) if accepting else np.zeros(0, dtype=bool),
        terminal_of=np.concatenate(owners) if owners else np.zeros(0, dtype=np.int32),
        start_of=np.array(starts, dtype=np.int32),
        rank=rank,
        unless=unless,
        names=names,
        ignore=frozenset(index[n] for n in ignore),
        reserved=frozenset(i for i, t in enumerate(terminals) if t.reserved),
    )


K = TypeVar("K", bound=Hashable)

# Lexer states (and combined states) an interner has room for before its table moves (see
# `codemask.engine.state_table`): fewer than a byte-level parser meets.
RESERVED_LEXER_STATES = 4096


class _Interner(Generic[K]):
    """Interned keys with a memo table ``table[id, byte]`` of transitions (grown on demand)."""

    def __init__(self) -> None:
        self.keys: list[K] = []
        self._index: dict[K, int] = {}
        self.table = unwritten_rows(RESERVED_LEXER_STATES, BYTE_ALPHABET)  # (a row written as its key is interned)
        self.lock = threading.RLock()

    def intern(self, key: K) -> int:
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.keys)
            self.keys.append(key)
            if found >= len(self.table):
                self.table = grown(self.table)
            self.table[found] = UNKNOWN
            self._on_new(found, key)
        return found

    def _on_new(self, ident: int, key: K) -> None:
        """Hook for subclasses keeping per-state arrays."""

    def _compute(self, state: int, byte: int) -> int:
        raise NotImplementedError

    def step(self, state: int, byte: int) -> int:
        nxt = int(self.table[state, byte])
        if nxt == UNKNOWN:
            with self.lock:
                nxt = self._compute(state, byte)
                self.table[state, byte] = nxt
        return nxt

    def advance(self, states: np.ndarray, symbols: np.ndarray) -> np.ndarray:
        """Vectorised `step` over arrays of live states and bytes."""
        nxt = self.table[states, symbols]
        unknown = nxt == UNKNOWN
        if unknown.any():
            with self.lock:
                pairs = np.unique(states[unknown].astype(np.int64) * BYTE_ALPHABET + symbols[unknown])
                for pair in pairs.tolist():
                    st, sy = divmod(pair, BYTE_ALPHABET)
                    if self.table[st, sy] == UNKNOWN:
                        self.table[st, sy] = self._compute(st, sy)
                nxt = self.table[states, symbols]
        return nxt

    def walk(self, state: int, data: bytes) -> int:
        for b in data:
            state = self.step(state, b)
            if state < 0:
                return DEAD
        return state


LexerKey = tuple[tuple[int, ...], tuple[int, ...], int, bool, bool, Measured | None, tuple[int, ...]]
EndClass = tuple[int, Measured | None]  # the terminal a lexeme ends as, and the newline's indentation


class LexerCore(_Interner[LexerKey]):
    """Lexer states of the current lexeme, with Lark's choice between terminals.

    Lark tries the candidate terminals in a fixed order and takes the first that matches, with
    its longest match. Streaming that: once terminal ``best`` has matched, terminals tried after
    it can never win and are dropped; terminals tried before it stay alive, and one of them
    matching later becomes the new ``best``. A key is ``(alternatives, trackers, best, matched,
    fresh)``: the live automaton states of the candidate terminals, the live states of *embedded*
    string terminals (kept only to retype ``best`` when its text equals theirs), the best terminal
    so far (-1: none), whether it matches at exactly this point, whether nothing was consumed,
    and (indentation grammars) the indentation measured while the newline terminal is alive, and
    the *blockers*: regex terminals that are candidates only because a reserved word they retype
    to is (``is`` is acceptable, so ``is_file`` must be lexed as one identifier, as Python's
    tokenizer does, and refused). A lexeme that can only end as a blocker is `poison`: the
    configuration dies, with no fallback to a shorter match.

    ``end_class_of[state]`` numbers the distinct ways a lexeme can end here: its winning
    terminal, with the measured indentation when that is the newline (-1: it cannot end here).
    """

    def __init__(self, automata: TerminalAutomata) -> None:
        self.automata = automata
        spec = getattr(automata, "indentation", None)
        self.newline = spec.newline if spec is not None else -1
        self.winner_of = np.full(64, -1, dtype=np.int32)
        self.end_class_of = np.full(64, -1, dtype=np.int32)
        self.end_classes: list[EndClass] = []
        self._end_index: dict[EndClass, int] = {}
        self.poisoned = np.zeros(64, dtype=bool)
        super().__init__()
        self._starts: dict[tuple[frozenset[int], frozenset[int]], int] = {}
        self.poison = self.intern(((), (), -1, False, False, None, ()))
        self.poisoned[self.poison] = True
        self._native = native.lexer_stepper(automata, newline=self.newline, poison=self.poison, keys=self.keys,
                                            index=self._index, next_column=next_column)

    def _on_new(self, ident: int, key: LexerKey) -> None:
        if ident >= len(self.winner_of):
            self.winner_of = np.concatenate([self.winner_of, np.full(len(self.winner_of), -1, dtype=np.int32)])
            self.end_class_of = np.concatenate([self.end_class_of, np.full(len(self.end_class_of), -1,
                                                                           dtype=np.int32)])
            self.poisoned = np.concatenate([self.poisoned, np.zeros(len(self.poisoned), dtype=bool)])
        winner = self._winner(key)
        self.winner_of[ident] = winner
        if winner >= 0:
            end = (winner, key[5] if winner == self.newline else None)
            self.end_class_of[ident] = self._end_index.setdefault(end, len(self.end_classes))
            if self.end_class_of[ident] == len(self.end_classes):
                self.end_classes.append(end)

    def _winner(self, key: LexerKey) -> int:
        alternatives, trackers, best, matched, _fresh, _column, _blockers = key
        if not matched:
            return -1
        auto = self.automata
        matching = {int(auto.terminal_of[s]) for s in alternatives + trackers if auto.accepting[s]}
        for string_terminal, _embedded in auto.unless[best]:
            if string_terminal in matching:
                return string_terminal
        return best

    def start(self, candidates: frozenset[int], blockers: frozenset[int] = frozenset()) -> int:
        """The fresh lexer state over the candidate terminals (``blockers`` among them)."""
        found = self._starts.get((candidates, blockers))
        if found is None:
            auto = self.automata
            embedded = {s for r in candidates for s, emb in auto.unless[r] if emb and s in candidates}
            alternatives = tuple(sorted(int(auto.start_of[t]) for t in candidates - embedded))
            trackers = tuple(sorted(int(auto.start_of[t]) for t in embedded))
            key = (alternatives, trackers, -1, False, True, None, tuple(sorted(blockers)))
            found = self._starts[(candidates, blockers)] = self.intern(key)
        return found

    def snapshot(self) -> tuple[list[LexerKey], np.ndarray, dict[tuple[frozenset[int], frozenset[int]], int]]:
        """This lexer's states, transitions and fresh states so far (what `adopt` takes); a
        transition to a state interned after the keys were copied is left unknown."""
        with self.lock:
            keys = list(self.keys)
            table = self.table[:len(keys)].copy()
            starts = {found: lid for found, lid in dict(self._starts).items() if lid < len(keys)}
        table[table >= len(keys)] = UNKNOWN
        return keys, table, starts

    def fresh_states(self) -> list[int]:
        """The fresh lexer states made so far (`start`), one per (candidates, blockers)."""
        with self.lock:
            return sorted(set(self._starts.values()))

    def adopt(self, keys: list[LexerKey], table: np.ndarray,
              starts: dict[tuple[frozenset[int], frozenset[int]], int]) -> None:
        """Take the states, transitions and fresh states another lexer of the same automata made
        (a saved `LexerMaskState`), keeping their numbers: this lexer's states so far must be the
        first of ``keys`` (as in any lexer right after its grammar compiled), since everything
        saved beside them is keyed by those numbers."""
        with self.lock:
            if keys[:len(self.keys)] != self.keys:
                raise ValueError("the saved lexer states do not extend this lexer's: it has states of its own")
            if table.shape != (len(keys), BYTE_ALPHABET):
                raise ValueError(f"saved transitions have shape {table.shape}, expected ({len(keys)}, {BYTE_ALPHABET})")
            if len(table) and (int(table.min()) < UNKNOWN or int(table.max()) >= len(keys)):
                raise ValueError("saved transitions lead to states that were not saved")
            if any(not 0 <= lid < len(keys) for lid in starts.values()):
                raise ValueError("saved fresh states were not saved")
            for key in keys[len(self.keys):]:
                self.intern(key)
            known = self.table[:len(keys)]
            known[known == UNKNOWN] = table[known == UNKNOWN]
            self._starts.update(starts)

    def winner(self, state: int) -> int:
        """The terminal the lexeme is if it ends here, or -1."""
        return int(self.winner_of[state])

    def is_fresh(self, state: int) -> bool:
        return self.keys[state][4]

    def end_class(self, state: int) -> EndClass:
        """How the lexeme ends if it ends here: terminal and, for a newline, its indentation."""
        return self.end_classes[int(self.end_class_of[state])]

    def native_stepper(self) -> native.LexerStepper:
        """The C transitions and walks of this lexer (only where the extension is loaded)."""
        if self._native is None:
            raise RuntimeError("the C extension is not loaded")
        return self._native

    def _compute(self, state: int, byte: int) -> int:
        if self._native is not None and native.enabled():
            return self._native.compute(self, state, byte)
        return self._compute_python(state, byte)

    def _compute_python(self, state: int, byte: int) -> int:
        """`_compute` in Python (without the C extension, and the tests' oracle)."""
        alternatives, trackers, best, _matched, _fresh, column, blockers = self.keys[state]
        auto = self.automata
        trans = auto.trans
        moved = {int(t) for t in (trans[s, byte] for s in alternatives) if t >= 0}
        matching = [int(auto.terminal_of[s]) for s in moved if auto.accepting[s]]
        matched = False
        if matching:
            first = min(matching, key=lambda t: auto.rank[t])
            if best < 0 or auto.rank[first] <= auto.rank[best]:
                best, matched = first, True
        tracked = {int(t) for t in (trans[s, byte] for s in trackers) if t >= 0}
        if best >= 0:
            # terminals tried after `best` can no longer win; the strings `best` retypes to stay
            # tracked so that a match equal to their text can still take their name
            retypes = {t for t, _embedded in auto.unless[best]}
            losing = {s for s in moved if auto.rank[auto.terminal_of[s]] > auto.rank[best]}
            tracked |= {s for s in losing if int(auto.terminal_of[s]) in retypes}
            moved -= losing
        if not moved:
            return DEAD
        if blockers and best in blockers and not tracked \
                and all(int(auto.terminal_of[s]) in blockers for s in moved):
            # only blockers can come of it, and the best match so far is one too (so no shorter
            # match to fall back on): poison now, even in the middle of a UTF-8 character,
            # rather than a live state whose every continuation dies
            return self.poison
        newline_alive = self.newline >= 0 and any(int(auto.terminal_of[s]) == self.newline for s in moved)
        column = next_column(column, byte) if newline_alive else None
        return self.intern((tuple(sorted(moved)), tuple(sorted(tracked)), best, matched, False, column, blockers))


class LexParserCore(_Interner[tuple[Config, ...]]):
    """Combined lexer + parser states (tuples of configurations), with byte transitions."""

    def __init__(self, parser: ParserCore, lexer: LexerCore) -> None:
        self.parser = parser
        self.lexer = lexer
        spec = getattr(lexer.automata, "indentation", None)
        auto = lexer.automata
        self.symbols = IndentingParser(parser, spec, auto.names) if spec is not None else SymbolParser(parser)
        auto = lexer.automata
        reserved: frozenset[int] = getattr(auto, "reserved", frozenset())
        self._reserved_of = {t: frozenset(s for s, _emb in auto.unless[t] if s in reserved)
                             for t in range(len(auto.names)) if reserved}
        self._blockers_of = {s: frozenset(t for t in range(len(auto.names)) if s in self._reserved_of.get(t, ()))
                             for s in reserved}
        self._candidates: dict[int, frozenset[int]] = {}
        self._by_allowed: dict[frozenset[int], tuple[frozenset[int], frozenset[int]]] = {}
        self._blockers: dict[int, frozenset[int]] = {}
        self._ends: dict[Config, Config | None] = {}
        self._fresh: dict[int, Config] = {}
        self._can_end = np.full(64, -1, dtype=np.int8)  # -1: not computed yet (most states never ask)
        super().__init__()
        self.native_steps = self._symbol_steps()
        if spec is not None:  # the input starts as if after a newline (the first line is at column 0)
            start = lexer.step(lexer.start(frozenset((spec.newline,))), 0x0A)
            self.initial = self.intern(((self.symbols.initial, start),))
        else:
            self.initial = self.intern((self.fresh(self.symbols.initial),))

    def _symbol_steps(self) -> native.SymbolSteps | None:
        """`after` and the fresh lexer states in C for the common cases (`native.symbol_steps`;
        None without the extension): a new parser context asks them about a hundred times."""
        auto = self.lexer.automata
        kinds = np.zeros(len(auto.names), dtype=np.uint8)
        kinds[sorted(auto.ignore)] |= native.SYMBOL_KINDS["ignored"]
        layout = self.symbols.native_layout(kinds)
        return native.symbol_steps(parser=self.parser, kinds=kinds, end_classes=self.lexer.end_classes, **layout,
                                   after=self._after, fresh=self.fresh_lexer_state)

    def _on_new(self, ident: int, key: tuple[Config, ...]) -> None:
        if ident >= len(self._can_end):
            self._can_end = np.concatenate([self._can_end, np.full(len(self._can_end), -1, dtype=np.int8)])

    # -- configurations ----------------------------------------------------------------------

    def candidates(self, pid: int) -> frozenset[int]:
        """Terminals the lexer considers at parser state ``pid``: acceptable ones plus ignored."""
        found = self._candidates.get(pid)
        if found is None:
            allowed = self.symbols.allowed(pid)
            known = self._by_allowed.get(allowed)
            if known is None:  # many parser states allow the same terminals
                known = self._by_allowed[allowed] = self._candidates_of(allowed)
            found, self._blockers[pid] = known
            self._candidates[pid] = found
        return found

    def _candidates_of(self, allowed: frozenset[int]) -> tuple[frozenset[int], frozenset[int]]:
        """(candidates, blockers) where the parser allows the terminals ``allowed``."""
        found = allowed | self.lexer.automata.ignore
        blockers: frozenset[int] = frozenset()
        if self._reserved_of:
            found = found.union(*(self._reserved_of.get(t, frozenset()) for t in allowed))
            blockers = frozenset().union(*(self._blockers_of.get(s, frozenset()) for s in allowed)) - allowed
            found |= blockers
        return found, blockers

    def blockers(self, pid: int) -> frozenset[int]:
        """Candidates at ``pid`` that only stand for reserved words (see `LexerCore`)."""
        self.candidates(pid)
        return self._blockers[pid]

    def fresh(self, pid: int) -> Config:
        """The configuration that starts a new lexeme at parser state ``pid`` (memoised: the mask
        computation asks it at every lexeme end it explores, tens of thousands of times per file)."""
        found = self._fresh.get(pid)
        if found is None:
            found = self._fresh[pid] = (pid, self.lexer.start(self.candidates(pid), self.blockers(pid)))
        return found

    def fresh_lexer_state(self, pid: int) -> int:
        """The lexer state of `fresh` (``fresh(pid)[1]``)."""
        return self.fresh(pid)[1]

    def end_lexeme(self, config: Config) -> Config | None:
        """End the current lexeme as its winning terminal and start a fresh one (None: refused)."""
        if config in self._ends:
            return self._ends[config]
        pid, lid = config
        result: Config | None = None
        if self.lexer.winner(lid) >= 0:
            nxt = self.after(pid, int(self.lexer.end_class_of[lid]))
            if nxt != DEAD:
                result = self.fresh(nxt)
        self._ends[config] = result
        return result

    def after(self, pid: int, end_class: int) -> int:
        """The parser state after a lexeme ended as ``end_class`` in parser state ``pid``."""
        steps = self.native_steps
        if steps is not None and native.enabled():
            return steps.after(pid, end_class)
        return self._after(pid, end_class)

    def _after(self, pid: int, end_class: int) -> int:
        """`after` in Python (without the extension, and for what the C one hands back)."""
        terminal, column = self.lexer.end_classes[end_class]
        if terminal in self.lexer.automata.ignore:
            return self.symbols.ignored(pid, terminal)
        return self.symbols.step(pid, terminal, column)

    def _step_configs(self, configs: tuple[Config, ...], byte: int) -> list[Config]:
        if not configs:
            return []
        (pid, lid), rest = configs[0], configs[1:]
        lexer = self.lexer
        out: list[Config] = []
        grown = lexer.step(lid, byte)
        if grown == lexer.poison:
            return []  # the longest match is a terminal the parser cannot take here
        if grown != DEAD:
            out.append((pid, grown))
            if lexer.winner(grown) >= 0:
                return out  # a longer match: every older fallback is void
        if lexer.winner(lid) >= 0:
            ended = self.end_lexeme((pid, lid))
            if ended is not None:
                restarted = lexer.step(ended[1], byte)
                if restarted != DEAD and restarted != lexer.poison:
                    out.append((ended[0], restarted))
            return out  # the current lexeme matched here: older fallbacks are void
        return out + [c for c in self._step_configs(rest, byte) if c not in out]

    def _compute(self, state: int, byte: int) -> int:
        configs = self._step_configs(self.keys[state], byte)
        return self.intern(tuple(configs)) if configs else DEAD

    def _configs_can_end(self, configs: tuple[Config, ...]) -> bool:
        for pid, lid in configs:
            if self.lexer.is_fresh(lid):
                return self.symbols.can_end(pid)
            if self.lexer.winner(lid) >= 0:
                ended = self.end_lexeme((pid, lid))
                return ended is not None and self.symbols.can_end(ended[0])
        return False

    # -- queries (the interface GrammarMatcher uses) -----------------------------------------

    def can_end(self, state: int) -> bool:
        found = int(self._can_end[state])
        if found < 0:
            found = int(self._configs_can_end(self.keys[state]))
            self._can_end[state] = found
        return bool(found)

    def allowed_symbols(self, state: int) -> np.ndarray:
        """Boolean mask of the bytes that keep the parse alive."""
        nxt = self.advance(np.full(BYTE_ALPHABET, state, dtype=np.int64), np.arange(BYTE_ALPHABET))
        return nxt >= 0

    def configs(self, state: int) -> tuple[Config, ...]:
        return self.keys[state]

    def fallback_state(self, state: int) -> int:
        """The state that takes over when the current lexeme dies without matching again."""
        configs = self.configs(state)
        first, rest = configs[0], configs[1:]
        if self.lexer.winner(first[1]) >= 0:
            ended = self.end_lexeme(first)
            return DEAD if ended is None else self.intern((ended,))
        return self.intern(rest) if rest else DEAD

    def scoped(self, state: int, until: str | None) -> int:
        """``state`` with a completion scope starting here (see :mod:`codemask.engine.completion`).

        ``until=None`` removes a scope. Only grammars with Python-style indentation have scopes.
        """
        symbols = self.symbols
        if not isinstance(symbols, IndentingParser):
            if until is None:
                return state
            raise ValueError("until= needs a grammar with Python-style indentation (%declare _INDENT _DEDENT)")
        configs = tuple((symbols.scoped(pid, until, self.lexer.keys[lid][5] is not None), lid)
                        for pid, lid in self.configs(state))
        return self.intern(configs)

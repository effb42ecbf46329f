"""Lexer-mode masks (`codemask.engine.lexer_masks`) against an independent reference: the byte
walk of every token through the combined lexer/parser states (`LexParserCore.advance`, the path
`accept_token` takes), at states along real source files; and the trie's suffix numbering
against the bytes themselves."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.engine import disk_cache, native
from codemask.engine.compiler import STATE_TYPES
from codemask.engine.lexer import LexParserCore
from codemask.engine.lexer_masks import LexerMaskComputer, LexerMaskState, Residuals, ResidualSplit
from codemask.engine.parser import DEAD
from codemask.engine.token_trie import TokenTrie, expand_ranges, token_trie
from tests.engine.conftest import compiler, encode, vocabulary

CODE = Path(__file__).resolve().parents[1] / "data" / "code"


def walked_mask(core: LexParserCore, trie: TokenTrie, state: int, vocab_size: int) -> np.ndarray:
    """Boolean [vocab_size]: the tokens whose every byte keeps ``state`` alive, level by level."""
    allowed = np.zeros(vocab_size, dtype=bool)
    nodes = np.arange(len(trie.levels[0].byte), dtype=np.int64)
    states = np.full(len(nodes), state, dtype=np.int64)
    for depth, level in enumerate(trie.levels):
        nxt = core.advance(states, level.byte[nodes].astype(np.int64))
        nodes, states = nodes[nxt >= 0], nxt[nxt >= 0]
        tokens = level.token[nodes]
        allowed[trie.token_ids(tokens[tokens >= 0].astype(np.int64))] = True
        if depth + 1 == len(trie.levels):
            break
        lo, hi = level.child_lo[nodes], level.child_hi[nodes]
        states = np.repeat(states, hi - lo)
        nodes = expand_ranges(lo, hi)
    return allowed


def mask_bools(words: np.ndarray, vocab_size: int) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)


SOURCES = {
    "python": textwrap.dedent(inspect.getsource(textwrap.TextWrapper._split))
    + textwrap.dedent(inspect.getsource(textwrap.indent)),
    "go": (CODE / "go" / "worker_pool.go").read_text(encoding="utf-8"),
    "sql": (CODE / "sql" / "shop_queries.sql").read_text(encoding="utf-8"),
}


@pytest.mark.parametrize("language", sorted(SOURCES))
def test_masks_equal_the_byte_walk_of_every_token(language: str) -> None:
    compiled = compiler("smollm2").compile(Grammar.builtin(language))
    masks, core = compiled.masks, compiled.core
    assert isinstance(masks, LexerMaskComputer) and isinstance(core, LexParserCore)
    vocab = vocabulary("smollm2")
    trie = token_trie(vocab)
    matcher = GrammarMatcher(compiled)
    tokens = encode("smollm2", SOURCES[language])[:160]
    checked = 0
    for step, token in enumerate(tokens):
        if step % 4 == 0:
            state = matcher._history[-1]
            got = mask_bools(masks.mask(state), vocab.vocab_size)
            want = walked_mask(core, trie, state, vocab.vocab_size)
            special = np.array(sorted(vocab.special_ids | vocab.stop_token_ids), dtype=np.int64)
            got[special] = want[special] = False
            differ = np.flatnonzero(got != want)
            assert not len(differ), [(vocab.token_bytes[i], bool(got[i])) for i in differ[:5].tolist()]
            checked += 1
        assert matcher.accept_token(token)
    assert checked == 40
    groups = [unc for position in masks._positions.values() for unc in position.uncertain.values()]
    assert len({id(unc) for unc in groups}) < len(groups)  # large groups shared by lexer states (`uncertain`)


UNARY_RUNS = """\
def f(x):
    y = -x + ~x - -x
    z = - - - - -y  # runs of unary operators, each a lexeme at an unchanged parser state
    w = ((((x))))   +    ~~~y
    return (------z) + +++++w
"""


def test_masks_equal_the_byte_walk_where_lexemes_leave_the_parser_state_unchanged() -> None:
    """After a unary operator, another one (or a blank) leaves the parser state as it was, so the
    mask follows such lexemes inside a token's residual in one walk (`_split_in_place`): a token
    of 16 dashes is 16 lexemes. Masks still equal the byte walk at every step of a file full of
    them, and the in-place walk was taken."""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    masks, core = compiled.masks, compiled.core
    assert isinstance(masks, LexerMaskComputer) and isinstance(core, LexParserCore)
    vocab = vocabulary("smollm2")
    assert b"----------------" in set(vocab.token_bytes)
    trie = token_trie(vocab)
    special = np.array(sorted(vocab.special_ids | vocab.stop_token_ids), dtype=np.int64)
    matcher = GrammarMatcher(compiled)
    for token in encode("smollm2", UNARY_RUNS):
        state = matcher._history[-1]
        got = mask_bools(masks.mask(state), vocab.vocab_size)
        want = walked_mask(core, trie, state, vocab.vocab_size)
        got[special] = want[special] = False
        differ = np.flatnonzero(got != want)
        assert not len(differ), [(vocab.token_bytes[i], bool(got[i])) for i in differ[:5].tolist()]
        assert matcher.accept_token(token)
    in_place = [key for residuals in masks.residual_sets._sets.values() for key in residuals.splits
                if isinstance(key, tuple)]
    assert len(in_place) > 10


@pytest.mark.skipif(not native.available(), reason="compares the C recursion with the Python one")
@pytest.mark.parametrize("limit", [4096, LexerMaskComputer.result_bytes_limit])
def test_the_c_residual_recursion_gives_the_python_recursions_masks(limit: int) -> None:
    """`native.ResidualWalker` against `LexerMaskComputer._residuals_accepted` at every step of
    real Python and of a file of unary runs (lexemes followed in place): the same masks, also
    with results kept for a few dozen (parser state, set) pairs, so that the two generations turn
    over many times; with the walker's results kept (combinations of a split and its children's
    results met again are taken from memory) and forgotten whenever they pass 4 KB."""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    core = compiled.core
    assert isinstance(core, LexParserCore)
    vocab = vocabulary("smollm2")
    small = LexerMaskComputer(core, vocab, capacity=4)  # 32 results a generation
    small.result_bytes_limit = limit
    walker = small._native_walker()
    assert walker is not None
    held, clears = 0, 0
    for source in (SOURCES["python"], UNARY_RUNS):
        matcher = GrammarMatcher(compiled)
        for token in encode("smollm2", source)[:150]:
            state = matcher._history[-1]
            in_c = small._compute(state)
            clears += walker.result_bytes < held
            held = walker.result_bytes
            small._cache.clear()  # the fallback masks too must come from the Python recursion
            with native.using(False):
                assert small._native_walker() is None
                in_python = small._compute(state)
            small._cache.clear()
            assert (in_c == in_python).all()
            assert matcher.accept_token(token)
    assert clears >= 2 if limit == 4096 else clears == 0


@pytest.mark.skipif(not native.available(), reason="reads the C recursion's results")
def test_the_c_recursions_results_are_numbered_by_content() -> None:
    """Equal flags have one number and different flags different ones, over the results of every
    uncertain group along real Python: `_walked` keys masks by these numbers, so two numbers for
    one content would only cost a mask, but one number for two contents would be a wrong mask.
    (Whether the flags are right is the comparison with the Python recursion above.)"""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    core = compiled.core
    assert isinstance(core, LexParserCore)
    computer = LexerMaskComputer(core, vocabulary("smollm2"))
    walker = computer._native_walker()
    assert walker is not None
    numbers: dict[bytes, int] = {}
    asked = 0
    matcher = GrammarMatcher(compiled)
    for token in encode("smollm2", SOURCES["python"]):
        pid, lid = core.configs(matcher._history[-1])[0]
        for end_class, unc in computer.position(lid).uncertain.items():
            resumed = core.after(pid, end_class)
            if resumed != DEAD:
                number = walker.result(resumed, unc.residuals)
                assert numbers.setdefault(walker.flags(number), number) == number
                asked += 1
        assert matcher.accept_token(token)
    assert len(set(numbers.values())) == len(numbers) and asked > 4 * len(numbers)
    assert walker.result_bytes >= sum(map(len, numbers))  # (and the inner results' flags)


def run_together(jobs: list[Callable[[], None]]) -> list[BaseException]:
    """Run each job in a thread of its own, all released at once, with the interpreter switching
    threads every microsecond (so that races show); the exceptions they raised (a thread's would
    otherwise only be printed)."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(jobs))

    def run(job: Callable[[], None]) -> None:
        try:
            start.wait()
            job()
        except BaseException as error:
            errors.append(error)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    return errors


def first_use(computer: LexerMaskComputer, made: list[tuple[object, object]]) -> None:
    made.append((computer._native_walker(), computer.residual_sets))


def test_threads_making_their_first_masks_together_share_one_walker_and_one_set_of_residuals() -> None:
    """The walker numbers its results, and `_walked` keys words by those numbers: two walkers
    made by two threads' first masks would each number from 0, and one's words would be found
    by the other's numbers (wrong masks); two `ResidualSets` would give clashing set indexes."""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    core = compiled.core
    assert isinstance(core, LexParserCore)
    vocab = vocabulary("smollm2")
    for _round in range(5):
        computer = LexerMaskComputer(core, vocab)
        made: list[tuple[object, object]] = []
        assert run_together([functools.partial(first_use, computer, made)] * 8) == []
        assert len(made) == 8 and len({id(walker) for walker, _sets in made}) == 1
        assert len({id(sets) for _walker, sets in made}) == 1


class CountedClears:
    """A `native.ResidualWalker` that counts its clears (the C object's methods are read-only)."""

    def __init__(self, walker: native.ResidualWalker) -> None:
        self.walker = walker
        self.clears = 0

    @property
    def result_bytes(self) -> int:
        return self.walker.result_bytes

    def result(self, pid: int, residuals: Residuals) -> int:
        return self.walker.result(pid, residuals)

    def flags(self, result: int) -> bytes:
        return self.walker.flags(result)

    def clear(self) -> None:
        self.clears += 1
        self.walker.clear()


def test_masks_computed_by_four_threads_at_once_are_one_threads_masks() -> None:
    """One computer shared by four threads that compute masks along real Python in different
    orders, with the walker's results cleared whenever they pass 2 KB and the interpreter switching
    threads every microsecond: every mask equals a computer's alone. (A result number held across
    another thread's clear would name other flags.)"""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    core = compiled.core
    assert isinstance(core, LexParserCore)
    vocab = vocabulary("smollm2")
    matcher = GrammarMatcher(compiled)
    states = []
    for token in encode("smollm2", SOURCES["python"]):
        states.append(matcher._history[-1])
        assert matcher.accept_token(token)
    states = list(dict.fromkeys(states))
    alone = LexerMaskComputer(core, vocab)
    want = {state: alone.mask(state).copy() for state in states}
    shared = LexerMaskComputer(core, vocab, capacity=8)
    shared.result_bytes_limit = 2048
    walker = shared._native_walker()
    counted = CountedClears(walker) if walker is not None else None
    if counted is not None:
        shared._native_walker = lambda: counted  # type: ignore[method-assign,assignment,return-value]
    orders = [states, states[::-1], states[1::2] + states[::2], states[::3] + states[1::3] + states[2::3]]
    wrong: list[int] = []

    def check(order: list[int]) -> None:
        wrong.extend(state for state in order if not (shared.mask(state) == want[state]).all())

    errors = run_together([functools.partial(check, order) for order in orders])
    assert not errors and not wrong, (errors[:3], wrong[:3])
    assert len(states) > 30 and (counted is None or counted.clears > 2)


@pytest.mark.skipif(not native.available(), reason="compares the C recursion with the Python one")
def test_the_c_recursion_agrees_on_splits_of_more_than_64_children() -> None:
    """The C walker remembers a split's split with loops by a 64-bit mask of the children that came
    back, for splits of at most 64 children; real splits have a dozen. Every split here gets 64
    copies of its first child in front (no members: they change no flag, but they come back where
    it does), so the real children sit past the mask's bits and the walker takes its other path:
    the masks stay the Python recursion's, along real Python and along unary runs (loops)."""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    core = compiled.core
    assert isinstance(core, LexParserCore)
    computer = LexerMaskComputer(core, vocabulary("smollm2"))
    sets = computer.residual_sets
    plain_split = sets.split
    padded: dict[tuple[int, int, frozenset[int]], ResidualSplit] = {}
    none = np.zeros(0, dtype=np.int64)

    def padded_split(residuals: Residuals, lid: int, loops: frozenset[int] = frozenset()) -> ResidualSplit:
        key = (residuals.index, lid, loops)
        if key not in padded:
            split = plain_split(residuals, lid, loops)
            first = split.children[:1]
            copies = [(cls, none, tails, none) for cls, _members, tails, _tail_of in first] * 64
            padded[key] = ResidualSplit(accepted=split.accepted, children=copies + split.children)
        return padded[key]

    sets.split = padded_split  # type: ignore[method-assign]
    for source in (SOURCES["python"], UNARY_RUNS):
        matcher = GrammarMatcher(compiled)
        for token in encode("smollm2", source)[:120]:
            state = matcher._history[-1]
            in_c = computer._compute(state)
            computer._cache.clear()
            with native.using(False):
                in_python = computer._compute(state)
            computer._cache.clear()
            assert (in_c == in_python).all()
            assert matcher.accept_token(token)
    assert any(key[2] for key in padded) and max(len(split.children) for split in padded.values()) > 64


def test_suffix_ids_number_equal_bytes_equally() -> None:
    trie = token_trie(vocabulary("smollm2"))
    row_start, ids = trie.suffix_ids
    assert len(ids) == int(trie.lengths.sum())
    first_of: dict[int, bytes] = {}
    id_of: dict[bytes, int] = {}
    for row in range(trie.num_tokens):
        data = trie.matrix[row, : trie.lengths[row]].tobytes()
        for k in range(len(data)):
            number = int(ids[row_start[row] + k])
            assert first_of.setdefault(number, data[k:]) == data[k:]
            assert id_of.setdefault(data[k:], number) == number
    assert len(first_of) == len(id_of) == int(ids.max()) + 1


def test_residual_sets_group_tails_as_np_unique_does() -> None:
    """`ResidualSets.intern` groups tails through a scratch table, not `np.unique`: the same sorted
    distinct suffixes, a representative of each with those bytes (members in trie-row order), and
    each tail mapped to its own — on the tails of every token after 1 and 2 bytes (thousands repeat
    another token's tail), twice, so the second call meets a scratch table the first left behind."""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    assert isinstance(compiled.core, LexParserCore)
    trie = token_trie(compiled.vocab)
    sets = LexerMaskComputer(compiled.core, compiled.vocab).residual_sets
    for skip in (1, 2, 1):
        rows = np.flatnonzero(trie.lengths > skip)
        starts = np.full(len(rows), skip, dtype=np.int64)
        numbers = trie.suffix_numbers(rows, starts)
        keys, _, inverse = np.unique(numbers, return_index=True, return_inverse=True)
        residuals, group = sets.intern(rows, starts)
        assert len(keys) < len(rows) - 1000  # thousands of tails repeat
        represented = trie.suffix_numbers(residuals.rows, residuals.starts)
        assert (represented[residuals.member_of_key] == keys).all()  # members are in row order
        assert (np.diff(residuals.rows) >= 0).all()
        assert (represented[group] == numbers).all()  # each tail maps to a member with its bytes
        assert (residuals.member_of_key[inverse.reshape(-1)] == group).all()
        assert (residuals.lengths == trie.lengths[residuals.rows] - residuals.starts).all()


def test_a_token_whose_residual_spells_a_keyword_then_more_is_refused() -> None:
    """After ``if x`` the residual of `` isinstance`` starts a fresh lexeme that Python reads as
    one NAME, which cannot follow ``x``: longest match must not fall back to the keyword ``is``."""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    vocab = vocabulary("smollm2")
    matcher = GrammarMatcher(compiled, prefix=b"if x")
    allowed = mask_bools(matcher.next_token_bitmask().view(np.uint32), vocab.vocab_size)
    ids = {data: i for i, data in enumerate(vocab.token_bytes)}
    assert allowed[ids[b" is"]] and allowed[ids[b" in"]] and allowed[ids[b" =="]]
    assert not allowed[ids[b" isinstance"]] and not allowed[ids[b" instance"]]
    assert not matcher.fork().accept_token(ids[b" isinstance"])


def _fresh_python(vocab_name: str = "smollm2") -> tuple[LexerMaskComputer, GrammarMatcher]:
    """A Python grammar from a compiler of its own (no memory or disk cache shared with others)."""
    compiled = GrammarCompiler(vocabulary(vocab_name), cache_dir=False, progress=False).compile(
        Grammar.builtin("python"))
    assert isinstance(compiled.masks, LexerMaskComputer)
    return compiled.masks, GrammarMatcher(compiled)


def _masks_along(masks: LexerMaskComputer, matcher: GrammarMatcher, text: str) -> list[np.ndarray]:
    found = []
    for token in encode("smollm2", text):
        found.append(masks.mask(matcher._history[-1]).copy())
        assert matcher.accept_token(token)
    return found


def _through_disk(state: LexerMaskState) -> LexerMaskState:
    """The state as a later process reads it from the disk cache."""
    back = disk_cache.decode(bytearray(disk_cache.encode(state, "state", STATE_TYPES)), "state", STATE_TYPES)
    assert isinstance(back, LexerMaskState)
    return back


def test_a_saved_mask_state_gives_a_new_computer_the_same_masks_with_fewer_classifications() -> None:
    """A state saved after one file (encoded as the disk cache stores it) and loaded into a new
    grammar's masks: on another file, every mask equals both a fresh grammar's and the byte walk
    of every token, and the lexer states the first file had met are not classified again."""
    trained, matcher = _fresh_python()
    _masks_along(trained, matcher, SOURCES["python"])
    state = _through_disk(trained.save_state())
    assert len(state.positions) > 10 and state.sets

    loaded, loaded_matcher = _fresh_python()
    loaded.load_state(state)
    fresh, fresh_matcher = _fresh_python()
    other = textwrap.dedent(inspect.getsource(textwrap.TextWrapper._wrap_chunks))
    got, want = _masks_along(loaded, loaded_matcher, other), _masks_along(fresh, fresh_matcher, other)
    assert len(got) == len(want) > 300
    for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(mine, theirs), index
    vocab = vocabulary("smollm2")
    special = np.array(sorted(vocab.special_ids | vocab.stop_token_ids), dtype=np.int64)
    trie, core = token_trie(vocab), loaded.core
    replay = GrammarMatcher(loaded_matcher.compiled)
    for index, token in enumerate(encode("smollm2", other)):
        if index % 8 == 0:
            state_id = replay._history[-1]
            mine = mask_bools(loaded.mask(state_id), vocab.vocab_size)
            walked = walked_mask(core, trie, state_id, vocab.vocab_size)
            mine[special] = walked[special] = False
            assert np.array_equal(mine, walked), index
        assert replay.accept_token(token)
    new_in_loaded = len(loaded._positions) - len(state.positions)
    assert new_in_loaded >= 0 and len(fresh._positions) - new_in_loaded >= 30  # (105 and 54 when written)


def test_a_mask_state_is_refused_where_it_cannot_fit() -> None:
    """Loading after the first mask, from another vocabulary or format, or into a lexer whose
    states went another way, raises instead of mixing numbers."""
    trained, matcher = _fresh_python()
    _masks_along(trained, matcher, "def f(x):\n    return x + 1\n")
    state = trained.save_state()

    used, used_matcher = _fresh_python()
    _masks_along(used, used_matcher, "x = 1\n")
    with pytest.raises(ValueError, match="before the first mask"):
        used.load_state(state)
    other_vocab, _ = _fresh_python("gpt2")
    with pytest.raises(ValueError, match="another vocabulary"):
        other_vocab.load_state(state)
    with pytest.raises(ValueError, match="format"):
        _fresh_python()[0].load_state(dataclasses.replace(state, format=state.format + 1))
    keys = list(state.lexer_keys)
    keys[1], keys[2] = keys[2], keys[1]
    with pytest.raises(ValueError, match="do not extend"):
        _fresh_python()[0].load_state(dataclasses.replace(state, lexer_keys=keys))


def test_a_saved_state_is_left_as_it_was_by_later_masks() -> None:
    """A server saves while it serves: the state taken before another file's masks encodes to the
    same bytes after them (it holds copies of the sets, whose splits grow), and loaded, it gives a
    new grammar the masks of a fresh one."""
    trained, matcher = _fresh_python()
    _masks_along(trained, matcher, SOURCES["python"])
    state = trained.save_state()
    before = disk_cache.encode(state, "state", STATE_TYPES)
    _masks_along(trained, GrammarMatcher(matcher.compiled), textwrap.dedent(inspect.getsource(textwrap.dedent)))
    assert disk_cache.encode(state, "state", STATE_TYPES) == before

    loaded, loaded_matcher = _fresh_python()
    loaded.load_state(disk_cache.decode(bytearray(before), "state", STATE_TYPES))  # type: ignore[arg-type]
    fresh, fresh_matcher = _fresh_python()
    other = textwrap.dedent(inspect.getsource(textwrap.TextWrapper._wrap_chunks))
    for index, (mine, theirs) in enumerate(zip(_masks_along(loaded, loaded_matcher, other),
                                              _masks_along(fresh, fresh_matcher, other), strict=True)):
        assert np.array_equal(mine, theirs), index


def test_a_state_whose_parts_do_not_fit_is_refused_before_anything_is_taken() -> None:
    """A state of other terminal automata (the SQL grammar's), or one whose split names a residual
    set it does not hold, raises and leaves the computer's lexer as it was."""
    trained, matcher = _fresh_python()
    _masks_along(trained, matcher, "def f(x):\n    return [x, x + 1]\n")
    state = trained.save_state()
    sql = GrammarCompiler(vocabulary("smollm2"), cache_dir=False, progress=False).compile(Grammar.builtin("sql"))
    assert isinstance(sql.masks, LexerMaskComputer)
    with pytest.raises(ValueError, match="other terminal automata"):
        sql.masks.load_state(state)

    with_children = next(found for found in state.sets.values()
                         if any(split.children for split in found.splits.values()))
    key, split = next((key, split) for key, split in with_children.splits.items() if split.children)
    broken = dataclasses.replace(split, children=[])  # (init again: flags and pairs of no children)
    broken.children = [(cls, members, dataclasses.replace(tails, splits={}), tail_of)
                       for cls, members, tails, tail_of in split.children]
    with_children.splits[key] = broken
    target, _ = _fresh_python()
    states_before = len(target.core.lexer.keys)
    with pytest.raises(ValueError, match="not saved"):
        target.load_state(state)
    assert len(target.core.lexer.keys) == states_before and not target._positions


def test_indentation_columns_are_classified_ahead() -> None:
    """`classify_indentation` classifies the lexer state of a newline and 0..n spaces from the fresh
    states met so far: a second call finds nothing new, the states are those the lexer reaches on
    those bytes, a later file indented at other columns classifies no newline state of its own,
    and a grammar without indentation has none."""
    masks, matcher = _fresh_python()
    _masks_along(masks, matcher, "def f(x):\n    return x\n")
    made = masks.classify_indentation(12)
    assert made >= 12 and masks.classify_indentation(12) == 0
    lexer = masks.core.lexer
    for lid in lexer.fresh_states():
        state = lexer.step(lid, 0x0A)
        if state >= 0 and lexer.winner(state) == lexer.newline:
            for _ in range(13):
                assert state in masks._positions
                state = lexer.step(state, 0x20)
    before = set(masks._positions)
    _masks_along(masks, GrammarMatcher(matcher.compiled), "def g(y):\n    z = (y,\n       y)\n    return z\n")
    newlines = [lid for lid in set(masks._positions) - before if lexer.winner(lid) == lexer.newline]
    assert not newlines  # the continuation line at column 7 met a newline state classified ahead
    sql = GrammarCompiler(vocabulary("smollm2"), cache_dir=False, progress=False).compile(Grammar.builtin("sql"))
    assert isinstance(sql.masks, LexerMaskComputer) and sql.masks.classify_indentation(12) == 0

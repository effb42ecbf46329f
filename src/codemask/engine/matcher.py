"""`GrammarMatcher`: the per-sequence state of a compiled grammar.

A matcher is a list of interned parser-state ids, one per accepted token (plus the initial
state). Accepting a token walks its bytes through the memoised transition table; rolling back
pops entries; forking copies a short list of ints. Masks come from the compiled grammar's shared
`MaskComputer`, so matchers of the same grammar (the rows of a batch, the K+1 positions of a
speculative step) reuse each other's work.

Code completion (docs/guides/code-completion.md): ``prefix=`` is the text before the cursor, accepted
before anything else (the matcher starts, and resets to, the state after it); ``until=`` scopes
the completion to a unit (``"line"``, ``"statement"``, ``"block"``, ``"function"``) for grammars
with Python-style indentation, so that EOS is allowed where that unit is complete and nothing
may follow it; ``suffix=`` is the text after the cursor (fill-in-the-middle): EOS is allowed only
where the suffix can follow and complete the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from codemask.engine.bitmask import host_array
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.parser import DEAD
from codemask.errors import MatcherError

TERMINATED = -3
MAX_JUMP_FORWARD_BYTES = 4096


class GrammarMatcher:
    """Accepts tokens of one sequence and produces the mask of the next token."""

    def __init__(self, compiled: CompiledGrammar, *, prefix: bytes | str = b"", until: str | None = None,
                 suffix: bytes | str | None = None) -> None:
        if not isinstance(compiled, CompiledGrammar):
            hint = " (compile it first: GrammarCompiler(vocab).compile(grammar))" \
                if type(compiled).__name__ == "Grammar" else ""
            raise TypeError(f"GrammarMatcher takes a CompiledGrammar, got {type(compiled).__name__}{hint}")
        self.compiled = compiled
        self._core, self._masks = compiled.generation()
        self._vocab = compiled.vocab
        self._stop_ids = compiled.vocab.stop_token_ids
        self._until = until
        self._prefix = _as_bytes(prefix)
        self._history: list[int] = [self._start(self._prefix, until)]
        self._suffix = None if suffix is None else _as_bytes(suffix)
        self._suffix_ok: dict[int, bool] = {}

    def _start(self, prefix: bytes, until: str | None) -> int:
        """The state after the prefix, with the completion scope (if any) beginning there."""
        if self._core.initial == DEAD:
            raise MatcherError("the grammar accepts no text at all (its language is empty)")
        state = self._core.walk(self._core.initial, prefix) if prefix else self._core.initial
        if state == DEAD:
            raise MatcherError("prefix= is not a prefix of any text the grammar accepts")
        if until is not None:
            scoped = getattr(self._core, "scoped", None)
            if scoped is None:
                raise MatcherError("until= needs a lexer-mode grammar with Python-style indentation")
            try:
                state = scoped(state, until)
            except ValueError as exc:
                raise MatcherError(str(exc)) from None
        return state

    def _can_stop(self, state: int) -> bool:
        """EOS allowed: the input (or the scoped unit) is complete, and the suffix can follow."""
        if self._suffix is None:
            return self._core.can_end(state)
        found = self._suffix_ok.get(state)
        if found is None:
            found = self._suffix_ok[state] = self._suffix_fits(state)
        return found

    def _suffix_fits(self, state: int) -> bool:
        """The suffix follows and completes the input; with ``until``, the unit is complete too.

        A cursor in the middle of a line has the rest of that line in the suffix: the unit (the
        line, in ``until="line"``) is then complete where the completion followed by that rest
        completes it (``name.endswith('.py'`` before ``):``), not where the completion alone would.
        The other units must be complete where the completion ends.
        """
        assert self._suffix is not None
        if self._until is not None:
            rest_of_line = self._suffix.split(b"\n", 1)[0]
            unit_end = state
            if self._until == "line" and rest_of_line.strip():
                unit_end = self._core.walk(state, rest_of_line)
            if unit_end == DEAD or not self._core.can_end(unit_end):
                return False  # the scoped unit is not complete yet
            state = self._core.scoped(state, None)  # type: ignore[union-attr]
        end = self._core.walk(state, self._suffix)
        return end != DEAD and self._core.can_end(end)

    # -- accepting ---------------------------------------------------------------------------

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token. Returns False (state unchanged) if the grammar forbids it.

        A stop token (EOS or a configured stop) is accepted exactly where the grammar may end and
        terminates the matcher.
        """
        self._check_open("accept_token")
        token_id = self._check_token_id(token_id)
        state = self._history[-1]
        if token_id in self._stop_ids:
            if not self._can_stop(state):
                return False
            self._history.append(TERMINATED)
            return True
        data = self._vocab.token_bytes[token_id]
        if not data or token_id in self._vocab.special_ids:
            return False
        nxt = self._core.walk(state, data)
        if nxt == DEAD:
            return False
        self._history.append(nxt)
        return True

    def accept_bytes(self, data: bytes | str) -> bool:
        """Advance by a byte string (one rollback step). False (state unchanged) if refused."""
        self._check_open("accept_bytes")
        nxt = self._core.walk(self._history[-1], _as_bytes(data))
        if nxt == DEAD:
            return False
        self._history.append(nxt)
        return True

    def accept_string(self, text: str) -> bool:
        """`accept_bytes` of a text's UTF-8 encoding."""
        return self.accept_bytes(_as_bytes(text))

    # -- masks -------------------------------------------------------------------------------

    def next_token_bitmask(self) -> np.ndarray:
        """The next-token mask as an int32 array of ``ceil(vocab_size / 32)`` words (shared, read-only)."""
        state = self._history[-1]
        words = self._masks.stop_words if state == TERMINATED else self._masks.mask(state)
        if self._suffix is not None and state != TERMINATED and self._can_stop(state) != self._core.can_end(state):
            words = words | self._masks.stop_words if self._can_stop(state) else words & ~self._masks.stop_words
        return words.view(np.int32)

    def fill_next_token_bitmask(self, bitmask: Any, row: int = 0) -> None:
        """Write the next-token mask into row ``row`` of an int32 bitmask (torch tensor or numpy).

        After termination only stop tokens are allowed, so a finished row of a batch still has a
        well-defined distribution.
        """
        words = self.next_token_bitmask()
        target = _row_view(bitmask, row)
        if target.shape[0] < len(words):
            raise ValueError(f"bitmask has {target.shape[0]} words per row, the vocabulary needs {len(words)}")
        target[: len(words)] = words
        target[len(words):] = 0

    def is_token_allowed(self, token_id: int) -> bool:
        """Whether the next-token mask allows ``token_id`` (a single-bit query)."""
        token_id = self._check_token_id(token_id)
        words = self.next_token_bitmask()
        return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)

    # -- state -------------------------------------------------------------------------------

    def is_terminated(self) -> bool:
        """Whether a stop token has been accepted."""
        return self._history[-1] == TERMINATED

    def can_terminate(self) -> bool:
        """Whether the input accepted so far is a complete sentence (a stop token is allowed)."""
        state = self._history[-1]
        return state != TERMINATED and self._can_stop(state)

    @property
    def num_accepted(self) -> int:
        """Tokens (and byte strings) accepted since the start or the last reset."""
        return len(self._history) - 1

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (termination included)."""
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int | np.integer):
            raise MatcherError(f"rollback takes a number of tokens (an int), got {type(num_tokens).__name__}")
        num_tokens = int(num_tokens)
        if num_tokens < 0 or num_tokens > self.num_accepted:
            raise MatcherError(f"cannot roll back {num_tokens} tokens: {self.num_accepted} accepted")
        if num_tokens:
            del self._history[-num_tokens:]

    def reset(self) -> None:
        """Back to the initial state, in the compiled grammar's current generation of parser
        states (`CompiledGrammar.generation`): a matcher reused for request after request does not
        hold an outgrown generation alive."""
        core, masks = self.compiled.generation()
        if core is self._core:
            del self._history[1:]
            return
        self._core, self._masks, self._suffix_ok = core, masks, {}
        self._history = [self._start(self._prefix, self._until)]  # (the prefix was accepted before: no error)

    def fork(self) -> GrammarMatcher:
        """An independent matcher in the same state (cheap: the history is a list of ints)."""
        twin = GrammarMatcher.__new__(GrammarMatcher)
        twin.__dict__.update(self.__dict__)
        twin._history = list(self._history)
        return twin

    def find_jump_forward_bytes(self) -> bytes:
        """The longest byte string the grammar forces from here (empty if there is a choice).

        Stops where the input could also end, since ending is a choice too.
        """
        state = self._history[-1]
        if state == TERMINATED:
            return b""
        out = bytearray()
        while len(out) < MAX_JUMP_FORWARD_BYTES and not self._can_stop(state):
            allowed = np.flatnonzero(self._core.allowed_symbols(state))
            if len(allowed) != 1:
                break
            byte = int(allowed[0])
            out.append(byte)
            state = self._core.step(state, byte)
        return bytes(out)

    # -- checks ------------------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self.is_terminated():
            raise MatcherError(f"{what}: the matcher has terminated (a stop token was accepted); "
                               "roll back or reset it first")

    def _check_token_id(self, token_id: int) -> int:
        if isinstance(token_id, bool) or not isinstance(token_id, int | np.integer):
            raise MatcherError(f"token id must be an int, got {type(token_id).__name__}")
        token_id = int(token_id)
        if not 0 <= token_id < self._vocab.vocab_size:
            raise MatcherError(f"token id {token_id} is outside the vocabulary (size {self._vocab.vocab_size})")
        return token_id


def _as_bytes(data: bytes | bytearray | str) -> bytes:
    """Text as UTF-8, or bytes. Anything else is a `TypeError`: ``bytes(n)`` of an int would be
    ``n`` zero bytes (a fuzzed ``accept_bytes(10**10)`` allocated 10 GB)."""
    if isinstance(data, str):
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError:  # (lone surrogates)
            raise ValueError(f"text is not encodable as UTF-8: {data!r:.60}") from None
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"expected bytes or str, got {type(data).__name__}")


def _row_view(bitmask: Any, row: int) -> np.ndarray:
    """A writable numpy view of one row of a CPU bitmask (torch tensor or numpy array): a 2-D
    ``[batch, words]`` one and a row in it, or one 1-D row (``row`` 0)."""
    arr = host_array(bitmask)
    if arr.dtype != np.int32:
        raise ValueError(f"bitmask must be int32, got {arr.dtype}")
    if isinstance(row, bool) or not isinstance(row, int | np.integer):
        raise TypeError(f"row must be an int, got {type(row).__name__}")
    if arr.ndim not in (1, 2):
        raise ValueError(f"bitmask must be 1-D (one row) or 2-D ([batch, words]), got {arr.ndim}-D")
    rows = arr.shape[0] if arr.ndim == 2 else 1
    if not 0 <= row < rows:
        what = "a 1-D bitmask holds one row (row 0)" if arr.ndim == 1 else f"the bitmask has {rows} rows"
        raise ValueError(f"row {int(row)} is out of range: {what}")
    if not arr.flags.writeable:
        raise ValueError("bitmask is read-only")
    return arr[int(row)] if arr.ndim == 2 else arr

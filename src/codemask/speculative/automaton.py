"""An incremental suffix automaton over token ids, for drafting what the context already says.

Code that edits or extends a file repeats long stretches of it. The longest suffix of the text so
far (prompt + output) that occurred earlier points at a place whose continuation is a good draft.
A suffix automaton answers that in O(1) amortised time per appended token, however long the
match: the match is kept as (state, length) and updated the way matching statistics are computed
(follow the token's transition, or fall back along suffix links), not searched for again.

The automaton is built over the text itself, so a match must end *before* the token just
appended (otherwise every suffix trivially matches itself): each token is first matched against
the automaton of the text without it, then added. Several texts (workspace files, the prompt) are
joined with :data:`SEPARATOR`, which matches nothing, so no match or continuation crosses them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

SEPARATOR = -1
"""A token that never matches (no transition leads over it): joins independent texts."""


class SuffixAutomaton:
    """The suffix automaton of a growing token sequence, and its longest earlier-occurring suffix.

    Per state: ``length`` (longest string of the state), ``link`` (suffix link), ``next``
    (transitions) and ``first_end`` (end index of the first occurrence, the same for every string
    of the state).
    """

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.text: list[int] = []
        self.length: list[int] = [0]
        self.link: list[int] = [-1]
        self.next: list[dict[int, int]] = [{}]
        self.first_end: list[int] = [-1]
        self._last = 0
        self._match = 0
        self._match_length = 0
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append ``tokens`` to the text, keeping the longest earlier-occurring suffix up to date."""
        for token in tokens:
            self._match, self._match_length = self.step(self._match, self._match_length, token)
            self._add(token)
            while self._match and self._match_length <= self.length[self.link[self._match]]:
                self._match = self.link[self._match]  # the match's state was split by a clone

    def step(self, state: int, length: int, token: int) -> tuple[int, int]:
        """The (state, length) of the longest suffix of ``match + token`` that occurs in the text."""
        if token == SEPARATOR:
            return 0, 0
        while state and token not in self.next[state]:
            state = self.link[state]
            length = self.length[state]
        target = self.next[state].get(token)
        if target is None:
            return 0, 0
        return target, length + 1

    def match(self, extra: Sequence[int] = ()) -> tuple[int, int]:
        """``(length, end)``: the longest suffix of text + ``extra`` that occurs earlier in the text,
        and the index in ``text`` where an occurrence of it ends (``end`` is -1 when nothing matches)."""
        state, length = self._match, self._match_length
        for token in extra:
            state, length = self.step(state, length, token)
        return (length, self.first_end[state]) if length else (0, -1)

    def continuation(self, extra: Sequence[int], limit: int, min_length: int = 1) -> list[int]:
        """Up to ``limit`` tokens that followed the longest earlier match of text + ``extra`` (none
        when it is shorter than ``min_length``); never runs past a :data:`SEPARATOR`."""
        length, end = self.match(extra)
        if length < max(min_length, 1):
            return []
        out = self.text[end + 1: end + 1 + limit]
        if SEPARATOR in out:
            out = out[: out.index(SEPARATOR)]
        return out

    def _add(self, token: int) -> None:
        """The textbook online construction (Blumer et al.), with ``first_end`` per state."""
        self.text.append(token)
        current = self._new_state(self.length[self._last] + 1, len(self.text) - 1)
        state = self._last
        while state != -1 and token not in self.next[state]:
            self.next[state][token] = current
            state = self.link[state]
        if state == -1:
            self.link[current] = 0
        else:
            target = self.next[state][token]
            if self.length[state] + 1 == self.length[target]:
                self.link[current] = target
            else:
                clone = self._new_state(self.length[state] + 1, self.first_end[target])
                self.next[clone] = dict(self.next[target])
                self.link[clone] = self.link[target]
                while state != -1 and self.next[state].get(token) == target:
                    self.next[state][token] = clone
                    state = self.link[state]
                self.link[target] = self.link[current] = clone
        self._last = current

    def _new_state(self, length: int, first_end: int) -> int:
        self.length.append(length)
        self.link.append(-1)
        self.next.append({})
        self.first_end.append(first_end)
        return len(self.length) - 1

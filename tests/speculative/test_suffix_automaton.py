"""The suffix automaton against a brute-force longest earlier match, on random and repetitive texts."""

from __future__ import annotations

import random

from codemask.speculative.automaton import SEPARATOR, SuffixAutomaton


def longest_earlier_match(text: list[int]) -> int:
    """Brute force: the longest suffix of ``text`` that also ends at an earlier index (no separator in it)."""
    n = len(text)
    best = 0
    for length in range(1, n):
        suffix = text[n - length:]
        if SEPARATOR in suffix:
            break
        if any(text[end - length + 1: end + 1] == suffix for end in range(length - 1, n - 1)):
            best = length
    return best


def check(automaton: SuffixAutomaton, text: list[int]) -> None:
    length, end = automaton.match()
    assert length == longest_earlier_match(text), text
    if length:
        assert end < len(text) - 1
        assert text[end - length + 1: end + 1] == text[len(text) - length:]


def test_matches_brute_force_token_by_token() -> None:
    rng = random.Random(0)
    for alphabet in (2, 3, 5):
        for _ in range(30):
            text = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 60))]
            automaton = SuffixAutomaton()
            for i in range(len(text)):
                automaton.extend([text[i]])
                check(automaton, text[: i + 1])


def test_repetitive_text_and_chunked_extension() -> None:
    rng = random.Random(1)
    base = [rng.randrange(50) for _ in range(40)]
    text = base + base[5:30] + [7, 7, 7, 7, 7, 7] + base[:20]
    automaton = SuffixAutomaton(text[:10])
    for start in range(10, len(text), 7):
        automaton.extend(text[start: start + 7])
        check(automaton, text[: start + 7])


def test_hypothetical_extra_tokens_and_continuation() -> None:
    text = [1, 2, 3, 4, 5, 9, 1, 2]
    automaton = SuffixAutomaton(text)
    assert automaton.match() == (2, 1)  # "1 2" first ended at index 1
    assert automaton.continuation([], 3) == [3, 4, 5]
    assert automaton.continuation([3], 2) == [4, 5]  # text + [3] matches "1 2 3"
    assert automaton.continuation([8], 2) == []
    assert automaton.continuation([], 3, min_length=3) == []
    rng = random.Random(2)
    for _ in range(50):
        text = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        extra = [rng.randrange(4) for _ in range(rng.randrange(0, 6))]
        automaton = SuffixAutomaton(text)
        length, end = automaton.match(extra)
        whole = text + extra
        best = max((n for n in range(1, len(whole) + 1)
                    if any(text[e - n + 1: e + 1] == whole[len(whole) - n:] for e in range(n - 1, len(text)))),
                   default=0)
        if not extra:
            best = longest_earlier_match(text)
        assert length == best, (text, extra)
        if length:
            assert text[end - length + 1: end + 1] == whole[len(whole) - length:]


def test_separator_is_never_crossed() -> None:
    automaton = SuffixAutomaton([1, 2, 3, SEPARATOR, 1, 2, 3, SEPARATOR, 4, 1, 2])
    length, _ = automaton.match()
    assert length == 2
    assert automaton.continuation([], 5) == [3]  # stops at the separator
    automaton.extend([SEPARATOR])
    assert automaton.match() == (0, -1)

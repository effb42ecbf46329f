"""The likeness measure RPG's copied-docstring rule uses, against difflib's definition worked by hand."""

from __future__ import annotations

import pytest

from codemask.repetition.likeness import likeness, words


def test_words_are_words_and_punctuation_with_the_own_name_blanked() -> None:
    assert words("Return f(x) + 1.", "f") == ["Return", "\0", "(", "x", ")", "+", "1", "."]
    assert words("fx f_x f", "f") == ["fx", "f_x", "\0"]  # whole names only
    assert words("  a\n\tb  ") == ["a", "b"]  # layout does not count


def test_likeness_is_twice_the_matched_words_over_all() -> None:
    assert likeness(words("a b c"), words("a b d")) == pytest.approx(2 * 2 / 6)
    assert likeness(words("same text"), words("same   text")) == 1.0
    assert likeness(words("a b"), words("c d")) == 0.0
    renamed = likeness(words(">>> count2('ab')", "count2"), words(">>> count3('ab')", "count3"))
    assert renamed == 1.0  # each docstring naming its own function reads the same

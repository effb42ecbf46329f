"""Recognizer: byte-level membership against json.loads, the independent oracle, on real grammars."""

from __future__ import annotations

import json
import random

from codemask.engine.recognizer import Recognizer
from codemask.grammar.grammar import Grammar

SAMPLES = ['{"a": [1, 2.5e-3, null]}', "[]", " true ", '"\\u00e9"', "{,}", '{"a" 1}', "01", "[1,]", '"\\x"', "-", ""]


def test_accepts_exactly_what_json_loads_reads() -> None:
    recognizer = Recognizer(Grammar.builtin("json"))
    rng = random.Random(3)
    texts = SAMPLES + ["".join(rng.choice('{}[]":,0123 -.eE\\ntrufalsn') for _ in range(rng.randint(1, 12)))
                       for _ in range(3000)]
    for text in texts:
        try:
            json.loads(text)
            valid = True
        except ValueError:
            valid = False
        assert recognizer.accepts(text) == valid, text


def test_prefixes_of_valid_texts_are_viable_and_dead_ends_are_not() -> None:
    recognizer = Recognizer(Grammar.builtin("json"))
    text = '{"key": [1, -2.5e+3, "x\\n"]}'
    assert all(recognizer.accepts_prefix(text[:i]) for i in range(len(text) + 1))
    assert not recognizer.accepts(text[:-1])
    assert not recognizer.accepts_prefix('{"key" ]')
    assert recognizer.accepts_prefix(text.encode())

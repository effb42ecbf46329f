"""The repeated-array-item decay of JSON generation (`codemask.decoding.json_items`)."""

from __future__ import annotations

import math

import pytest
import torch

from codemask.decoding.json_items import ItemScanner, SeparatorTokens, decay_repeated_item_
from tests.engine.conftest import vocabulary


def scanned(text: str, *, split: int = 3) -> ItemScanner:
    scanner = ItemScanner()
    data = text.encode()
    for start in range(0, len(data), split):  # tokens of a few bytes, as a tokenizer would cut them
        scanner.feed(data[start:start + split])
    return scanner


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": ["Ace", "Ace"', (2, False)),
    ('{"a": ["Ace", "Ace", "Ace"', (3, False)),
    ('{"a": ["Ace", "King"', (1, False)),
    ('{"a": ["Ace", "Ace", "Ace', (3, True)),  # the closing quote would complete a third copy
    ('{"a": ["Ace", "Ace", "Ac', (1, True)),
    ("[1, 1, 1", (3, False)),  # a number is complete where a delimiter may come
    ("[1, 1, 12", (1, False)),
    ('[{"k": [1, 2]}, {"k": [1, 2]}', (2, False)),  # nested items compared whole
    ('[{"k": [1, 2]}, {"k" : [1,2]}', (2, False)),  # whitespace outside strings does not count
    ('["a,b", "a,b"', (2, False)),  # commas inside strings are content
    ('["a\\"", "a\\"', (2, True)),  # an escaped quote does not end the string
    ('["Ace", "Ace",', (0, False)),  # after the comma: no decision pending
    ('{"a": "Ace", "b": "Ace"', (0, False)),  # object members are not array items
])
def test_scanner_counts_identical_trailing_items(text: str, expected: tuple[int, bool]) -> None:
    assert scanned(text).repeats() == expected
    assert scanned(text, split=1).repeats() == expected


def test_rollback_and_fork_give_the_state_of_the_shorter_text() -> None:
    scanner = scanned('["x", "x", "x"')
    fork = scanner.fork()
    scanner.rollback(2)
    assert scanner.repeats() == scanned('["x", "x", "x"'[: len(scanner._log) * 3]).repeats()
    assert fork.repeats() == (3, False)


def test_decay_moves_the_next_items_mass_to_closing_the_array() -> None:
    """Real vocabulary: after three identical items, the comma tokens lose (1 - 0.5**2) of their
    probability and the closing tokens gain exactly that; masked tokens stay masked."""
    vocab = vocabulary("llama3")
    separators = SeparatorTokens.of(vocab)
    comma, close = vocab.token_bytes.index(b","), vocab.token_bytes.index(b"]")
    masked = vocab.token_bytes.index(b"]}")
    logits = torch.full((len(vocab.token_bytes),), -20.0)
    logits[comma], logits[close], logits[masked] = 5.0, 1.0, -math.inf
    before = torch.softmax(logits, -1)
    decay_repeated_item_(logits, scanned('["Ace", "Ace", "Ace"'), 0.5, separators)
    after = torch.softmax(logits, -1)
    assert after[masked] == 0
    commas = separators.next_item
    closes = separators.close[separators.close != masked]
    lost = before[commas].sum() - after[commas].sum()
    assert float(after[commas].sum()) == pytest.approx(float(before[commas].sum()) * 0.25, rel=1e-3)
    assert float(after[closes].sum() - before[closes].sum()) == pytest.approx(float(lost), rel=1e-3)
    assert after[close] > after[comma]


def test_no_decay_without_a_repeat_or_where_closing_is_impossible() -> None:
    vocab = vocabulary("llama3")
    separators = SeparatorTokens.of(vocab)
    logits = torch.randn(len(vocab.token_bytes))
    untouched = logits.clone()
    decay_repeated_item_(logits, scanned('["Ace", "King"'), 0.5, separators)
    assert torch.equal(logits, untouched)
    logits[separators.close] = -math.inf  # minItems: the grammar forbids closing
    decay_repeated_item_(logits, scanned('["Ace", "Ace"'), 0.5, separators)
    assert torch.isinf(logits[separators.close]).all()

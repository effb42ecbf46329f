"""A position's uncertain tokens (`uncertain_entries`): each owner's exits grouped by residual bytes."""

from __future__ import annotations

import numpy as np

from codemask.engine.token_trie import token_trie
from codemask.engine.uncertain import uncertain_entries
from tests.engine.conftest import residual_bytes, uncertain_pairs, vocabulary


def test_uncertain_entries_group_each_owners_residuals_by_their_bytes() -> None:
    """Per owner, the record holds every exiting token (duplicate spellings included) with the
    residual bytes it was given, each distinct residual once, represented by its first exit."""
    trie = token_trie(vocabulary("llama3"))
    rng = np.random.default_rng(3)
    count = 40
    sizes = rng.integers(0, 3000, count)
    sizes[::7] = 0  # owners without exits
    owner = np.repeat(np.arange(count), sizes)
    rows = rng.integers(0, trie.num_tokens, len(owner))
    # many residuals shared (short tails of common tokens), some long
    offsets = np.maximum(trie.lengths[rows].astype(np.int64) - rng.integers(1, 4, len(owner)), 0)
    offsets[::5] = 0
    batched = uncertain_entries(trie, owner, rows, offsets, count)
    for i in range(count):
        mine = np.flatnonzero(owner == i)
        got = batched[i]
        if not len(mine):
            assert got is None
            continue
        assert got is not None
        tails = [bytes(trie.matrix[r, k:trie.lengths[r]]) for r, k in zip(rows[mine], offsets[mine], strict=True)]
        want = {(int(t), tail) for r, tail in zip(rows[mine].tolist(), tails, strict=True)
                for t in trie.token_ids(np.array([r])).tolist()}
        assert uncertain_pairs(trie, got) == want
        residuals = [residual_bytes(trie, got, r) for r in range(len(got.residual_len))]
        assert sorted(residuals) == sorted(set(tails))  # each distinct residual exactly once
        first_of = {tail: (int(rows[j]), int(offsets[j])) for j, tail in zip(mine.tolist()[::-1], tails[::-1],
                                                                              strict=True)}
        for r, tail in enumerate(residuals):
            assert (int(got.residual_rows[r]), int(got.residual_starts[r])) == first_of[tail]

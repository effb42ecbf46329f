"""Correctness cross-checks between engines that ran the same documents.

Engines that implement the same language must accept the same documents and, after the same prefix,
allow the same tokens: where they do not, one of them is wrong. Their languages are not exactly the
same, though, and those differences by design are taken out before anything is called a
disagreement (the raw counts are reported as well):

- added tokens, special or not (XGrammar lets them match character classes such as C's ``[^\\n]`` or
  JSON string characters; llguidance never allows them), and the padding bits past the vocabulary;
- JSON strings: ``\\/`` and raw DEL, which llguidance refuses, and ``\\uD800``-``\\uDFFF`` surrogate
  escapes, which it takes only as a high-low pair (the others allow lone ones, as JSON's grammar does),
  also where the escape is split between the text before and the token;
- the JSON top level: what it may be (codemask's builtin grammar is RFC 8259's ``ws value ws``;
  XGrammar's builtin and the llguidance schema used here take an object or array only) and whether
  whitespace may follow it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from engines import byte_level_token_bytes

MAX_EXAMPLES = 8
JSON_STRING_DIFFERENCES = re.compile(rb"\\(?:/|u[dD][89a-fA-F])|\x7f")
JSON_WHITESPACE = b" \t\n\r"


class Run(Protocol):
    """What the cross-checks read of one engine's run over one document."""

    accepted: bool
    failure: str | None
    masks: np.ndarray | None


class TokenTable:
    """Token id -> bytes for the comparison: None for added/special tokens and ids past the vocabulary."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        added = set(tokenizer.added_tokens_decoder) | set(getattr(tokenizer, "all_special_ids", []))
        self.data: list[bytes | None] = []
        for token_id in range(vocab_size):
            piece = None if token_id in added else tokenizer.convert_ids_to_tokens(token_id)
            try:
                self.data.append(None if piece is None else byte_level_token_bytes(piece))
            except KeyError:  # not a byte-level piece: leave it out of the comparison
                self.data.append(None)

    def excluded_words(self, workload: str) -> np.ndarray:
        """int32 mask words with a bit set for every token the comparison leaves out."""
        excluded = np.ones(((self.vocab_size + 31) // 32) * 32, dtype=bool)
        for token_id, data in enumerate(self.data):
            excluded[token_id] = data is None or (workload == "json" and bool(JSON_STRING_DIFFERENCES.search(data)))
        return np.packbits(excluded, bitorder="little").view(np.int32)

    def describe(self, token_id: int) -> str:
        data = self.data[token_id] if token_id < self.vocab_size else None
        if data is not None:
            return repr(data)[1:]
        piece = self.tokenizer.convert_ids_to_tokens(token_id) if token_id < self.vocab_size else None
        return repr(piece) if piece is not None else f"<unused id {token_id}>"


def acceptance_disagreements(runs: Mapping[str, Mapping[int, Run]], docs: Sequence[str]) -> list[dict[str, Any]]:
    """Documents that some engines accept and others refuse."""
    out = []
    for index, doc in enumerate(docs):
        verdicts = {name: by_doc[index] for name, by_doc in runs.items() if index in by_doc}
        if len({run.accepted for run in verdicts.values()}) > 1:
            out.append({"doc": index, "text": doc[:200],
                        "accepted_by": sorted(n for n, run in verdicts.items() if run.accepted),
                        "refused_by": {n: run.failure for n, run in verdicts.items() if not run.accepted}})
    return out


def json_known_difference(prefix: bytes, token: bytes, step: int) -> bool:
    """Whether ``token`` after ``prefix`` is allowed by one JSON engine and not another by design.

    An escape llguidance refuses that the token completes (``\\`` before, ``/`` in the token), or the
    top-level policy: at the first step anything but ``{`` or ``[`` first (a scalar, leading
    whitespace); later a token that completes the top-level value and then has whitespace.
    """
    tail = prefix[-5:]
    if any(m.end() > len(tail) for m in JSON_STRING_DIFFERENCES.finditer(tail + token)):
        return True
    if step == 0 and token[:1] not in (b"{", b"["):
        return True
    core = token.rstrip(JSON_WHITESPACE)
    if core == token:
        return False
    try:
        json.loads(prefix + core)
    except ValueError:
        return False
    return True


def mask_disagreements(runs: Mapping[str, Mapping[int, Run]], tokenized: Sequence[list[int]], table: TokenTable,
                       workload: str) -> list[dict[str, Any]]:
    """For each pair of engines, the steps where their masks differ beyond the known differences."""
    excluded = table.excluded_words(workload)
    names = list(runs)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            out.append(_compare_pair(runs[a], runs[b], a, b, tokenized, table, workload, excluded))
    return out


def _compare_pair(runs_a: Mapping[int, Run], runs_b: Mapping[int, Run], a: str, b: str,
                  tokenized: Sequence[list[int]], table: TokenTable, workload: str,
                  excluded: np.ndarray) -> dict[str, Any]:
    compared = raw = differing = 0
    examples: list[dict[str, Any]] = []
    for index, tokens in enumerate(tokenized):
        run_a, run_b = runs_a.get(index), runs_b.get(index)
        if run_a is None or run_b is None or run_a.masks is None or run_b.masks is None:
            continue
        steps = min(len(run_a.masks), len(run_b.masks))
        xor = run_a.masks[:steps] ^ run_b.masks[:steps]
        compared += steps
        raw += int(xor.any(axis=1).sum())
        for step in np.flatnonzero((xor & ~excluded).any(axis=1)):
            only_a, only_b = _unexplained(run_a.masks[step], run_b.masks[step], excluded, tokens, int(step),
                                          table, workload)
            if len(only_a) or len(only_b):
                differing += 1
                if len(examples) < MAX_EXAMPLES:
                    examples.append(_example(index, int(step), tokens, only_a, only_b, a, b, table))
    return {"engines": [a, b], "steps_compared": compared, "steps_differing_raw": raw,
            "steps_differing": differing, "examples": examples}


def _unexplained(mask_a: np.ndarray, mask_b: np.ndarray, excluded: np.ndarray, tokens: list[int], step: int,
                 table: TokenTable, workload: str) -> tuple[np.ndarray, np.ndarray]:
    bits_a = _bits(mask_a & ~excluded)
    bits_b = _bits(mask_b & ~excluded)
    only_a, only_b = np.flatnonzero(bits_a & ~bits_b), np.flatnonzero(bits_b & ~bits_a)
    if workload != "json":
        return only_a, only_b
    prefix = b"".join(table.data[t] or b"" for t in tokens[:step])

    def keep(ids: np.ndarray) -> np.ndarray:
        return np.array([t for t in ids if not json_known_difference(prefix, table.data[t] or b"", step)],
                        dtype=np.int64)

    return keep(only_a), keep(only_b)


def _bits(words: np.ndarray) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), bitorder="little").astype(bool)


def _example(doc: int, step: int, tokens: list[int], only_a: np.ndarray, only_b: np.ndarray, a: str, b: str,
             table: TokenTable) -> dict[str, Any]:
    prefix = table.tokenizer.decode(tokens[:step])
    return {"doc": doc, "step": step, "prefix_tail": prefix[-60:],
            f"only_{a}": {"count": len(only_a), "tokens": [table.describe(int(t)) for t in only_a[:6]]},
            f"only_{b}": {"count": len(only_b), "tokens": [table.describe(int(t)) for t in only_b[:6]]}}

"""Name masks on the real Qwen3 and Llama-3 vocabularies: merged-dot tokens, prefixes, breaks, keywords."""

from __future__ import annotations

import re

import numpy as np
import pytest

from codemask.assets import load_tokenizer
from codemask.monitors.masks import NameMasks
from codemask.monitors.spec import language_spec
from codemask.vocab import Vocabulary

BREAKS = language_spec("python").break_characters


@pytest.fixture(scope="module", params=["qwen3", "llama3"])
def vocab_masks(request: pytest.FixtureRequest) -> tuple[dict[bytes, int], NameMasks]:
    vocab = Vocabulary.from_tokenizer(load_tokenizer(request.param))
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b and i not in vocab.special_ids}
    return ids, NameMasks(vocab, BREAKS)


def allowed(mask: np.ndarray, ids: dict[bytes, int], spelling: bytes) -> bool:
    return bool(mask[ids[spelling]])


def test_merged_dot_tokens(vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    ids, masks = vocab_masks
    assert b".append" in ids and b".extend" in ids  # the case this exists for
    mask = masks.allowed(["append", "count"], b"", b".")
    assert mask is not None
    assert allowed(mask, ids, b".append") and allowed(mask, ids, b".app") and allowed(mask, ids, b".count")
    assert not allowed(mask, ids, b".extend") and not allowed(mask, ids, b".add")
    assert allowed(mask, ids, b".") and allowed(mask, ids, b"(") and allowed(mask, ids, b" =")  # out of scope
    assert allowed(mask, ids, b"append")  # no dot: not a member access, left alone
    if b".append(" in ids:
        assert allowed(mask, ids, b".append(")


def test_prefixes_and_full_names_followed_by_a_break(vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    ids, masks = vocab_masks
    mask = masks.allowed(["restock_shelf", "total"], b"res")
    assert mask is not None
    assert allowed(mask, ids, b"to") and allowed(mask, ids, b"t")  # "res" + "to..." is a prefix
    assert not allowed(mask, ids, b"ult") and not allowed(mask, ids, b"(")  # "resul…", "res(" are no names
    full = masks.allowed(["total"], b"total")
    assert full is not None
    assert allowed(full, ids, b"(") and allowed(full, ids, b"()") and allowed(full, ids, b"\n")
    assert not allowed(full, ids, b"s") and not allowed(full, ids, b"_")  # would make another identifier
    assert masks.allowed(["total"], b"zz") is None  # nothing fits what is typed: no constraint


def test_mask_matches_a_brute_force_definition(vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    ids, masks = vocab_masks
    names = ["append", "app", "items", "__len__", "x"]
    mask = masks.allowed(names, b"", b"")
    assert mask is not None
    breaks = set(BREAKS.encode())
    for spelling, token in ids.items():
        if not (spelling[0:1].isalnum() or spelling[0:1] in (b"_",) or spelling[0] >= 0x80):
            assert mask[token]
            continue
        expected = any(n.encode().startswith(spelling) for n in names) or any(
            spelling.startswith(n.encode()) and len(spelling) > len(n) and spelling[len(n)] in breaks for n in names)
        assert bool(mask[token]) == expected, spelling


def test_keyword_arguments(vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    ids, masks = vocab_masks
    typed = masks.keywords(["count", "urgent"], b"name")  # `name=` would be no parameter of the callee
    assert not allowed(typed, ids, b"=") and allowed(typed, ids, b"==") and allowed(typed, ids, b".")
    assert allowed(typed, ids, b")") and allowed(typed, ids, b",")
    assert not allowed(typed, ids, b" =") and allowed(typed, ids, b" ==")  # `name =` is no escape
    done = masks.keywords(["count"], b"count")
    assert allowed(done, ids, b"=") and allowed(done, ids, b"==")
    partial = masks.keywords(["count"], b"cou")
    assert allowed(partial, ids, b"nt") and not allowed(partial, ids, b"=")
    fresh = masks.keywords(["count"], b"")
    forms = [s for s in ids if re.fullmatch(rb" ?[A-Za-z_]+=", s)]  # tokens that finish `word=` at once
    assert forms and not any(allowed(fresh, ids, s) for s in forms)
    assert allowed(fresh, ids, b"count") and allowed(fresh, ids, b"(") and allowed(fresh, ids, b"==")


def test_after_a_complete_trigger_only_names_follow(vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    ids, masks = vocab_masks
    mask = masks.allowed(["Inventory", "quote_price"], b"", free=b"(")  # right after `from m import `
    assert mask is not None
    assert allowed(mask, ids, b"Inventory") or allowed(mask, ids, b"In")
    assert allowed(mask, ids, b"(") and not allowed(mask, ids, b"\n") and not allowed(mask, ids, b"1")
    started = masks.allowed(["Inventory", "quote_price"], b"In", free=b"(")
    assert started is not None and not allowed(started, ids, b"(")  # `In(`: "(" is free only before a name


def test_top_level_punctuation_matches_a_brute_force_definition(
        vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    ids, masks = vocab_masks
    nesting = set(b"()[]{}\"'`#")
    for char in ",)":
        mask = masks.forbid_top_level(char)
        for spelling, token in ids.items():
            at = spelling.find(char.encode())
            expected_forbidden = at >= 0 and not any(b in nesting and b != ord(char) for b in spelling[:at])
            assert bool(mask[token]) != expected_forbidden, (char, spelling)
    comma = masks.forbid_top_level(",")
    assert not comma[ids[b","]] and comma[ids[b"."]]
    assert comma[ids[b"(\""]] if b"(\"" in ids else True


def test_keyword_argument_only_matches_a_brute_force_definition(
        vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    ids, masks = vocab_masks
    targets = [b"count=", b"urgent="]
    fresh = masks.keyword_argument_only(["count", "urgent"])
    assert fresh is not None
    for spelling, token in ids.items():
        stripped = spelling.lstrip(b" \t\r\n\f")
        expected = (not stripped or stripped[0:1] == b")"
                    or any(t.startswith(stripped) or stripped.startswith(t) for t in targets))
        assert bool(fresh[token]) == expected, spelling
    no_space = masks.keyword_argument_only(["count"], more_space=False)
    assert no_space is not None and not no_space[ids[b"\n"]] and not no_space[ids[b" "]] and no_space[ids[b")"]]
    typed = masks.keyword_argument_only(["count", "urgent"], b"ur")
    assert typed is not None
    for spelling, token in ids.items():
        expected = any(t.startswith(b"ur") and (t[2:].startswith(spelling) or spelling.startswith(t[2:]))
                       for t in targets)
        assert bool(typed[token]) == expected, spelling
    assert masks.keyword_argument_only(["count"], b"3") is None  # a positional argument: left alone


def test_stop_and_special_tokens_wait_for_a_whole_name(vocab_masks: tuple[dict[bytes, int], NameMasks]) -> None:
    """End-of-sequence (and any special token) ends no name: forbidden right after a complete
    trigger and inside a partial name, allowed once the name is whole, and left alone where
    nothing constrains the step yet (the merged-dot probe)."""
    _ids, masks = vocab_masks
    stops = masks.not_names
    assert len(stops) >= 1
    after_trigger = masks.allowed(["opening_balance", "open"], b"", free=b"")
    partial = masks.allowed(["opening_balance", "open"], b"opening_")
    whole = masks.allowed(["opening_balance", "open"], b"open")
    probe = masks.allowed(["opening_balance"], b"", b".")
    assert after_trigger is not None and partial is not None and whole is not None and probe is not None
    assert not after_trigger[stops].any() and not partial[stops].any()
    assert whole[stops].all() and probe[stops].all()

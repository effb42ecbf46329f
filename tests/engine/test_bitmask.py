"""Tests for the token bitmask format and its application to logits (torch path and Triton kernel)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from codemask.engine import bitmask as bm
from codemask.engine.bitmask import (
    BITMASK_DTYPE,
    allocate_token_bitmask,
    apply_token_bitmask_,
    bitmask_width,
    pack_bool_mask,
    reset_token_bitmask,
    unpack_bitmask,
)

FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INT_VIEW = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float64: torch.int64,
}
NEG_INF = float("-inf")


# --- oracles -----------------------------------------------------------------------------------


def bit_is_set(word: int, bit: int) -> bool:
    """Bit ``bit`` of a signed int32 word, read the slow and obvious way."""
    return (word & 0xFFFFFFFF) >> bit & 1 == 1


def reference_apply(logits, bitmask, indices=None, vocab_size=None):
    """What apply_token_bitmask_ must produce, one token at a time in Python (small vocabularies only)."""
    out = logits.clone()
    out2d = out.view(1, -1) if out.dim() == 1 else out
    words = (bitmask.view(1, -1) if bitmask.dim() == 1 else bitmask).tolist()
    n_columns = out2d.shape[1]
    vocab = min(n_columns, 32 * len(words[0])) if vocab_size is None else vocab_size
    rows = range(out2d.shape[0]) if indices is None else [int(i) for i in indices]
    for row in rows:
        for token in range(n_columns):
            if token >= vocab or not bit_is_set(words[row][token // 32], token % 32):
                out2d[row, token] = NEG_INF
    return out


def random_logits(shape, dtype, seed):
    """Normal logits with NaN, ±inf, -inf and -0.0 sprinkled in, to check bit-exactness."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(shape, generator=gen).to(dtype)
    flat = logits.view(-1)
    specials = torch.tensor([float("nan"), float("inf"), NEG_INF, -0.0, 0.0], dtype=dtype)
    where = torch.randint(0, flat.numel(), (min(20, flat.numel()),), generator=gen)
    flat[where] = specials[torch.arange(len(where)) % len(specials)]
    return logits


def random_bitmask(rows, words, seed, density=0.5):
    """Random words; ``density`` is the fraction of allowed tokens (grammar masks are rarely 50/50)."""
    rng = np.random.default_rng(seed)
    allowed = rng.random((rows, words * 32)) < density
    return torch.from_numpy(pack_bool_mask(allowed))


def assert_bits_equal(actual, expected):
    """Equal bit for bit, so NaN payloads, -0.0 and infinities are compared exactly."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    view = INT_VIEW[actual.dtype]
    assert torch.equal(actual.view(view), expected.view(view))


# --- allocation --------------------------------------------------------------------------------


@pytest.mark.parametrize(("vocab_size", "width"), [(1, 1), (31, 1), (32, 1), (33, 2), (128_256, 4008), (151_936, 4748)])
def test_allocate_shape_dtype_and_everything_allowed(vocab_size, width):
    mask = allocate_token_bitmask(3, vocab_size)
    assert mask.shape == (3, width) == (3, bitmask_width(vocab_size))
    assert mask.dtype == BITMASK_DTYPE == torch.int32
    assert mask.device.type == "cpu"
    assert bool((mask == -1).all())


def test_pin_memory_is_a_request_that_falls_back_without_an_accelerator():
    mask = allocate_token_bitmask(2, 100, pin_memory=True)
    assert bool((mask == -1).all())
    assert mask.is_pinned() == bm._accelerator_available()


def test_allocate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        allocate_token_bitmask(0, 10)
    with pytest.raises(ValueError, match="vocab_size"):
        allocate_token_bitmask(1, 0)
    with pytest.raises(ValueError, match="pin_memory"):
        allocate_token_bitmask(1, 10, device="meta", pin_memory=True)


def test_reset_allows_everything_again():
    mask = allocate_token_bitmask(2, 70)
    mask.zero_()
    reset_token_bitmask(mask)
    assert bool((mask == -1).all())
    with pytest.raises(ValueError, match="int32"):
        reset_token_bitmask(torch.zeros(2, 3, dtype=torch.int64))


# --- apply: agreement with the oracle ----------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 100, 257])
@pytest.mark.parametrize("density", [0.03, 0.5, 0.97])
def test_random_masks_match_reference(dtype, vocab, density):
    seed = vocab * 7 + int(density * 100)
    logits = random_logits((4, vocab), dtype, seed)
    mask = random_bitmask(4, bitmask_width(vocab), seed, density)
    expected = reference_apply(logits, mask)
    apply_token_bitmask_(logits, mask)
    assert_bits_equal(logits, expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_one_dimensional_logits(dtype):
    logits = random_logits((77,), dtype, 1)
    mask = random_bitmask(1, 3, 1)
    expected = reference_apply(logits, mask)
    apply_token_bitmask_(logits, mask[0])  # 1-D bitmask
    assert_bits_equal(logits, expected)
    other = random_logits((77,), dtype, 2)
    expected = reference_apply(other, mask)
    apply_token_bitmask_(other, mask)  # [1, W] bitmask
    assert_bits_equal(other, expected)


def test_allowed_logits_keep_their_exact_bits_and_forbidden_become_minus_inf():
    specials = [float("nan"), float("inf"), NEG_INF, -0.0, 0.0, 1.5, -3e38, 1e-45]
    logits = torch.tensor(specials * 2, dtype=torch.float32)
    allowed = np.array([True] * len(specials) + [False] * len(specials))
    original = logits.clone()
    apply_token_bitmask_(logits, torch.from_numpy(pack_bool_mask(allowed)))
    n = len(specials)
    assert torch.equal(logits[:n].view(torch.int32), original[:n].view(torch.int32))
    assert torch.equal(logits[n:], torch.full((n,), NEG_INF))


def test_all_zero_mask_forbids_everything_and_all_ones_changes_nothing():
    logits = random_logits((3, 100), torch.float32, 5)
    original = logits.clone()
    apply_token_bitmask_(logits, allocate_token_bitmask(3, 100))
    assert_bits_equal(logits, original)
    apply_token_bitmask_(logits, torch.zeros(3, 4, dtype=torch.int32))
    assert torch.equal(logits, torch.full((3, 100), NEG_INF))


def test_word_minus_one_allows_its_32_tokens_and_the_sign_bit_is_token_31():
    logits = torch.zeros(1, 64)
    words = torch.tensor([[-1, -(2**31)]], dtype=torch.int32)  # all of 0..31, then only token 63
    apply_token_bitmask_(logits, words)
    allowed = ~torch.isneginf(logits[0])
    assert allowed.nonzero().flatten().tolist() == [*range(32), 63]


def test_already_minus_inf_logits_stay_minus_inf():
    logits = torch.full((2, 50), NEG_INF)
    apply_token_bitmask_(logits, random_bitmask(2, 2, 9))
    assert torch.equal(logits, torch.full((2, 50), NEG_INF))


# --- apply: vocabulary padding -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_logits_wider_than_bitmask_mask_the_padding_columns(dtype):
    logits = random_logits((3, 70), dtype, 11)  # the bitmask covers 64 tokens
    mask = torch.full((3, 2), -1, dtype=torch.int32)
    apply_token_bitmask_(logits, mask)
    assert torch.isneginf(logits[:, 64:]).all()
    assert not torch.isneginf(logits[:, :64].float().nan_to_num(0.0, 1.0, 1.0)).any()


def test_padding_columns_both_ways_match_reference():
    for n_columns, width, vocab_size in [(70, 2, None), (40, 3, None), (64, 2, 50), (100, 4, 97), (96, 5, 90)]:
        logits = random_logits((3, n_columns), torch.float32, n_columns)
        mask = random_bitmask(3, width, width, density=0.8)
        expected = reference_apply(logits, mask, vocab_size=vocab_size)
        apply_token_bitmask_(logits, mask, vocab_size=vocab_size)
        assert_bits_equal(logits, expected)


def test_bitmask_wider_than_logits_uses_only_the_first_bits():
    logits = torch.zeros(1, 40)
    mask = torch.zeros(1, 3, dtype=torch.int32)
    mask[0, 1] = -1  # tokens 32..63 allowed: only 32..39 exist in the logits
    apply_token_bitmask_(logits, mask)
    assert (~torch.isneginf(logits[0])).nonzero().flatten().tolist() == list(range(32, 40))


def test_explicit_vocab_size_masks_tokens_beyond_it_even_where_bits_are_set():
    logits = torch.zeros(2, 64)
    apply_token_bitmask_(logits, allocate_token_bitmask(2, 64), vocab_size=50)
    assert torch.isneginf(logits[:, 50:]).all()
    assert (logits[:, :50] == 0).all()


# --- apply: indices ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_indices",
    [list, tuple, np.array, lambda x: torch.tensor(x, dtype=torch.int32), lambda x: torch.tensor(x)],
    ids=["list", "tuple", "numpy", "int32-tensor", "int64-tensor"],
)
def test_indices_mask_only_listed_rows_with_the_same_bitmask_row(make_indices):
    logits = random_logits((5, 90), torch.float32, 3)
    mask = random_bitmask(5, 3, 3)
    rows = [3, 0, 4]
    expected = reference_apply(logits, mask, indices=rows)
    apply_token_bitmask_(logits, mask, indices=make_indices(rows))
    assert_bits_equal(logits, expected)


def test_indices_allow_different_row_counts_and_duplicates():
    logits = random_logits((3, 50), torch.bfloat16, 4)
    big_mask = random_bitmask(8, 2, 4)  # preallocated for a larger batch
    expected = reference_apply(logits, big_mask, indices=[2, 2, 1])
    apply_token_bitmask_(logits, big_mask, indices=[2, 2, 1])
    assert_bits_equal(logits, expected)
    wide_logits = random_logits((8, 50), torch.float16, 5)
    small_mask = random_bitmask(3, 2, 5)
    expected = reference_apply(wide_logits, small_mask, indices=[0, 2])
    apply_token_bitmask_(wide_logits, small_mask, indices=[0, 2])
    assert_bits_equal(wide_logits, expected)


def test_gathered_strategy_for_accelerators_matches_reference():
    """The gather/mask/scatter used for indices on accelerators, checked here on the CPU."""
    logits = random_logits((6, 70), torch.bfloat16, 13)
    mask = random_bitmask(6, 3, 13)
    expected = reference_apply(logits, mask, indices=[5, 1, 1, 2], vocab_size=66)
    bm._apply_gathered(logits, mask, torch.tensor([5, 1, 1, 2]), 66)
    assert_bits_equal(logits, expected)


def test_empty_indices_mask_nothing():
    logits = random_logits((2, 40), torch.float32, 6)
    original = logits.clone()
    apply_token_bitmask_(logits, torch.zeros(2, 2, dtype=torch.int32), indices=[])
    apply_token_bitmask_(logits, torch.zeros(2, 2, dtype=torch.int32), indices=torch.empty(0, dtype=torch.long))
    assert_bits_equal(logits, original)


# --- apply: layouts and sizes that exercise the CPU grouping -----------------------------------


def test_non_contiguous_logits_are_masked_in_place():
    hidden = random_logits((3, 4, 100), torch.float32, 7)
    last = hidden[:, -1, :]  # what a model's output[:, -1] is: rows 400 floats apart
    mask = random_bitmask(3, 4, 7)
    expected = reference_apply(last, mask)
    apply_token_bitmask_(last, mask)
    assert_bits_equal(hidden[:, -1, :], expected)
    strided = random_logits((2, 200), torch.float32, 8)[:, ::2]
    expected = reference_apply(strided, mask[:2])
    apply_token_bitmask_(strided, mask[:2], indices=[1, 0])
    assert_bits_equal(strided, expected)


@pytest.mark.parametrize(("batch", "vocab"), [(1200, 1000), (7, 151_936), (3, 2**19 + 5)])
@pytest.mark.parametrize("use_indices", [False, True])
def test_large_batches_and_vocabularies_match_numpy_unpacking(batch, vocab, use_indices):
    """Sizes that span several CPU row groups, checked against the independent numpy unpacking."""
    assert batch > bm._CPU_TOKENS_PER_GROUP // vocab  # more than one group
    logits = random_logits((batch, vocab), torch.float32, batch)
    mask = random_bitmask(batch, bitmask_width(vocab), vocab, density=0.1)
    rows = list(range(batch - 1, -1, -2)) if use_indices else list(range(batch))
    expected = logits.clone()
    forbidden = torch.from_numpy(~unpack_bitmask(mask.numpy(), vocab))
    expected[rows] = expected[rows].masked_fill(forbidden[rows], NEG_INF)
    apply_token_bitmask_(logits, mask, indices=rows if use_indices else None)
    assert_bits_equal(logits, expected)


def test_row_groups_do_not_change_the_result(monkeypatch):
    logits = random_logits((10, 100), torch.float16, 12)
    mask = random_bitmask(10, 4, 12)
    expected = reference_apply(logits, mask, indices=[9, 0, 4, 4, 7])
    monkeypatch.setattr(bm, "_CPU_TOKENS_PER_GROUP", 250)  # groups of 2 rows
    apply_token_bitmask_(logits, mask, indices=[9, 0, 4, 4, 7])
    assert_bits_equal(logits, expected)


# --- apply: errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("logits", "mask", "kwargs", "message"),
    [
        (torch.zeros(2, 32, dtype=torch.int32), torch.zeros(2, 1, dtype=torch.int32), {}, "logits must be"),
        (np.zeros((2, 32), np.float32), torch.zeros(2, 1, dtype=torch.int32), {}, "logits must be"),
        (torch.zeros(2, 3, 32), torch.zeros(2, 1, dtype=torch.int32), {}, r"\[batch, vocab\]"),
        (torch.zeros(2, 0), torch.zeros(2, 1, dtype=torch.int32), {}, r"\[batch, vocab\]"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int64), {}, "int32"),
        (torch.zeros(2, 32), np.zeros((2, 1), np.int32), {}, "int32"),
        (torch.zeros(2, 32), torch.zeros(2, 1, 1, dtype=torch.int32), {}, r"\[batch, words\]"),
        (torch.zeros(2, 32), torch.zeros(3, 1, dtype=torch.int32), {}, "indices="),
        (torch.zeros(2, 64), torch.zeros(2, 1, dtype=torch.int32), {"vocab_size": 33}, "vocab_size 33"),
        (torch.zeros(2, 32), torch.zeros(2, 2, dtype=torch.int32), {"vocab_size": 40}, "vocab_size 40"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"vocab_size": 0}, "vocab_size 0"),
        (torch.zeros(2, 32), torch.zeros(4, 1, dtype=torch.int32), {"indices": [2]}, "index 2"),
        (torch.zeros(4, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": [0, 3]}, "index 3"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": [-1]}, "index -1"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": [0.0]}, "sequence of ints"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": [True]}, "sequence of ints"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": ["a"]}, "sequence of ints"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": [[0]]}, "sequence of ints"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": 0}, "sequence of ints"),
        (torch.zeros(2, 32), torch.zeros(2, 1, dtype=torch.int32), {"indices": torch.tensor([0.0])}, "ints"),
    ],
)
def test_invalid_inputs_raise_value_error_and_leave_logits_alone(logits, mask, kwargs, message):
    before = logits.clone() if isinstance(logits, torch.Tensor) else logits.copy()
    with pytest.raises(ValueError, match=message):
        apply_token_bitmask_(logits, mask, **kwargs)
    assert (before == logits).all()


# --- numpy helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [1, 8, 31, 32, 33, 100, 1000])
def test_pack_bool_mask_matches_bit_definition(vocab):
    allowed = np.random.default_rng(vocab).random(vocab) < 0.4
    words = pack_bool_mask(allowed)
    assert words.dtype == np.int32 and words.shape == (bitmask_width(vocab),)
    as_list = words.tolist()
    for token in range(len(as_list) * 32):
        assert bit_is_set(as_list[token // 32], token % 32) == (token < vocab and bool(allowed[token]))


def test_pack_and_unpack_round_trip_batched_and_into_out():
    allowed = np.random.default_rng(0).random((3, 1001)) < 0.5
    words = pack_bool_mask(allowed)
    assert words.shape == (3, 32)
    assert np.array_equal(unpack_bitmask(words, 1001), allowed)
    target = allocate_token_bitmask(5, 1001)
    returned = pack_bool_mask(allowed[1], out=target[2].numpy())
    assert np.array_equal(returned, words[1])
    assert torch.equal(target[2], torch.from_numpy(words[1]))
    assert bool((target[[0, 1, 3, 4]] == -1).all())


def test_unpack_ignores_bits_past_vocab_size_and_reads_non_contiguous_rows():
    words = np.array([[-1, -1], [0, 7]], dtype=np.int32)
    assert unpack_bitmask(words, 40).tolist()[0] == [True] * 40
    column_major = np.asfortranarray(words)
    assert unpack_bitmask(column_major, 64)[1].nonzero()[0].tolist() == [32, 33, 34]


def test_numpy_helpers_agree_with_the_torch_path_bit_for_bit():
    rng = np.random.default_rng(42)
    for vocab in (5, 64, 999, 151_936):
        allowed = rng.random((2, vocab)) < 0.3
        words = pack_bool_mask(allowed)
        logits = torch.zeros(2, vocab)
        apply_token_bitmask_(logits, torch.from_numpy(words))
        assert np.array_equal(~torch.isneginf(logits).numpy(), allowed)
        random_words = rng.integers(-(2**31), 2**31, size=(2, bitmask_width(vocab)), dtype=np.int32)
        logits = torch.zeros(2, vocab)
        apply_token_bitmask_(logits, torch.from_numpy(random_words))
        assert np.array_equal(~torch.isneginf(logits).numpy(), unpack_bitmask(random_words, vocab))


@pytest.mark.parametrize("vocab", [1, 31, 33, 100, 4097])
def test_torch_unpacking_for_accelerators_matches_numpy(vocab):
    """The unpacking used on devices numpy cannot read, checked here on the CPU."""
    words = random_bitmask(3, bitmask_width(vocab) + 1, vocab)
    unpacked = bm._allowed_tokens_torch(words, vocab)
    assert unpacked.shape == (3, vocab)
    assert np.array_equal(unpacked.numpy() != 0, unpack_bitmask(words.numpy(), vocab))


def test_numpy_helpers_reject_wrong_inputs():
    with pytest.raises(ValueError, match="bool"):
        pack_bool_mask(np.ones(10, dtype=np.uint8))
    with pytest.raises(ValueError, match="non-empty"):
        pack_bool_mask(np.ones(0, dtype=bool))
    with pytest.raises(ValueError, match="out must be"):
        pack_bool_mask(np.ones(40, dtype=bool), out=np.empty(1, dtype=np.int32))
    with pytest.raises(ValueError, match="out must be"):
        pack_bool_mask(np.ones(40, dtype=bool), out=np.empty(2, dtype=np.int64))
    with pytest.raises(ValueError, match="int32"):
        unpack_bitmask(np.zeros(2, dtype=np.uint32), 10)
    with pytest.raises(ValueError, match="does not fit"):
        unpack_bitmask(np.zeros(2, dtype=np.int32), 65)


# --- Triton ------------------------------------------------------------------------------------


def test_triton_dispatch_falls_back_to_torch_when_triton_does_not_import(monkeypatch):
    bm._triton_apply.cache_clear()
    monkeypatch.setitem(sys.modules, "codemask.engine.bitmask_triton", None)
    try:
        assert bm._triton_apply() is None
    finally:
        bm._triton_apply.cache_clear()


TRITON_CHECK = textwrap.dedent(
    """
    import numpy as np, torch
    from codemask.engine.bitmask import apply_token_bitmask_, pack_bool_mask
    from codemask.engine.bitmask_triton import apply_token_bitmask_triton

    rng = np.random.default_rng(0)
    cases = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        for rows, n_columns, width, vocab_size, indices in [
            (3, 100, 4, None, None),        # vocab not a multiple of 32, bitmask covers 128
            (2, 5000, 150, None, None),     # logits wider than the bitmask (4800): padding masked
            (2, 8199, 257, 8199, [1]),      # more than one program per row, a tail word
            (4, 64, 2, 50, [3, 0, 3]),      # explicit vocab_size, duplicate indices
            (2, 4096, 128, None, []),       # nothing to mask
        ]:
            logits = torch.randn(rows, n_columns).to(dtype)
            logits[0, :4] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0]).to(dtype)
            words = torch.from_numpy(pack_bool_mask(rng.random((rows, width * 32)) < 0.3))
            expected = logits.clone()
            apply_token_bitmask_(expected, words, indices=indices, vocab_size=vocab_size)
            vocab = min(n_columns, 32 * width) if vocab_size is None else vocab_size
            device_rows = None if indices is None else torch.tensor(indices, dtype=torch.int32)
            actual = logits.clone()
            apply_token_bitmask_triton(actual, words, device_rows, vocab)
            view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[logits.element_size()]
            assert torch.equal(actual.view(view), expected.view(view)), (dtype, rows, n_columns, width, indices)
            cases += 1
    strided = torch.randn(3, 2, 300)[:, 1, :]   # row stride 600: what output[:, -1] looks like
    words = torch.from_numpy(pack_bool_mask(rng.random((3, 320)) < 0.5))
    expected = strided.clone()
    apply_token_bitmask_(expected, words)
    apply_token_bitmask_triton(strided, words, None, 300)
    assert torch.equal(strided, expected)
    print("triton interpreter cases:", cases + 1)
    """
)


def test_triton_kernel_under_interpreter_matches_torch_path():
    if sys.platform != "linux":
        pytest.skip("Triton publishes wheels for Linux only")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    result = subprocess.run(
        [sys.executable, "-c", TRITON_CHECK], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "triton interpreter cases: 21" in result.stdout


@pytest.mark.parametrize("count", [0, 1, 2, bm._FEW_IDS, bm._FEW_IDS + 1, 5000])
def test_pack_ids_sets_exactly_the_ids_few_or_many(count: int) -> None:
    """Both ways of packing ids (one by one for a few, a boolean row for many) give the row that
    has exactly those bits, the vocabulary's last id and a word's edges included."""
    vocab_size = 128_256
    rng = np.random.default_rng(count)
    ids = rng.choice(vocab_size, size=count, replace=False) if count > 2 else np.array([vocab_size - 1, 31][:count])
    words = bm.pack_ids(ids.astype(np.int64), vocab_size)
    assert words.dtype == np.uint32 and len(words) == bitmask_width(vocab_size)
    allowed = unpack_bitmask(words.view(np.int32), vocab_size)
    assert sorted(np.flatnonzero(allowed).tolist()) == sorted(ids.tolist())
    for outside in (-1, vocab_size):  # (either way of packing: never a wrapped or padding bit)
        with pytest.raises(ValueError, match="token ids must be in"):
            bm.pack_ids(np.append(ids, outside).astype(np.int64), vocab_size)


def test_host_array_aliases_a_tensors_memory_while_its_layout_holds() -> None:
    """The numpy array over a CPU bitmask tensor is made once and handed out again only for the
    same tensor with the same memory and layout: writes land in the tensor, and an in-place change
    of shape or storage gives an array over what the tensor is now."""
    tensor = torch.full((2, 5), -1, dtype=torch.int32)
    bm.host_array(tensor)  # (seen once: the tensor's own array, for a slice made per call)
    array = bm.host_array(tensor)
    array[1, 2] = 7
    assert tensor[1, 2].item() == 7 and bm.host_array(tensor) is array
    assert not isinstance(array.base, torch.Tensor)  # (an alias: the tensor is not held)
    tensor.unsqueeze_(0)
    reshaped = bm.host_array(tensor)
    assert reshaped is not array and reshaped.shape == (1, 2, 5)
    tensor.set_(torch.zeros((3, 4), dtype=torch.int32))
    moved = bm.host_array(tensor)
    assert moved.shape == (3, 4) and not moved.any()
    moved[2, 3] = 5
    assert tensor[2, 3].item() == 5
    numpy_bitmask = np.zeros((1, 4), dtype=np.int32)
    assert bm.host_array(numpy_bitmask) is numpy_bitmask


def test_host_array_of_tensors_that_come_and_go_stays_bounded_and_right() -> None:
    """Many short-lived bitmasks (ids reused by Python) each get their own memory's array."""
    for value in range(3 * bm._HOST_ARRAYS_KEPT):
        tensor = torch.full((1, 3), value, dtype=torch.int32)
        assert (bm.host_array(tensor) == value).all() and (bm.host_array(tensor) == value).all()
    assert len(bm._HOST_ARRAYS) <= bm._HOST_ARRAYS_KEPT


def test_a_bitmask_in_use_keeps_its_array_while_slices_come_and_go() -> None:
    """A decoding loop's bitmask keeps its alias however many slices made per call pass through
    (theirs leave first once they are gone), and a slice's array is still its own memory."""
    bitmask = torch.zeros((4, 6), dtype=torch.int32)
    bm.host_array(bitmask)
    alias = bm.host_array(bitmask)
    for row in range(3 * bm._HOST_ARRAYS_KEPT):
        view = bitmask[row % 4]
        bm.host_array(view)[:] = row
        assert (bitmask[row % 4] == row).all()
    assert bm.host_array(bitmask) is alias


def test_host_array_refuses_what_is_not_a_cpu_bitmask() -> None:
    with pytest.raises(ValueError, match="fill the bitmask on the CPU"):
        bm.host_array(torch.empty((1, 4), dtype=torch.int32, device="meta"))
    with pytest.raises(TypeError, match="int32 numpy array or torch tensor"):
        bm.host_array([[0, 0]])


def test_host_array_from_many_threads_at_once() -> None:
    """Threads filling bitmasks of their own, more of them than the registry keeps, each always
    get their own tensor's memory."""
    from concurrent.futures import ThreadPoolExecutor

    def fill(value: int) -> bool:
        tensor = torch.zeros((1, 8), dtype=torch.int32)
        for step in range(200):
            bm.host_array(tensor)[0, step % 8] = value
        return bool((tensor == value).all())

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(fill, range(1, 3 * bm._HOST_ARRAYS_KEPT)))

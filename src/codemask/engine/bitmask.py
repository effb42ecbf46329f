"""Token bitmasks: the packed allowed-token format, and masking logits with it on any device.

The format is the one XGrammar, llguidance, outlines-core and vLLM share, so that masks travel
between codemask and those engines unchanged: an int32 tensor ``[batch, ceil(vocab_size / 32)]``
in which bit ``i % 32`` (least significant first) of word ``i // 32`` is set exactly when token ``i``
is allowed. A word of ``-1`` allows all 32 of its tokens; ``0`` forbids them. The engine fills rows
on the CPU (numpy views of the same memory, :func:`pack_bool_mask`), and the decoding stage applies
them with :func:`apply_token_bitmask_` on the model's device.

Why packed: a row is ``vocab_size / 8`` bytes (19 KB for a 152k vocabulary instead of 152 KB of
bools or 600 KB of float), which is what makes the host-to-device copy per step negligible.

Why the torch path does integer arithmetic on the logits' bits rather than ``masked_fill_``: on the
CPU, torch's boolean-mask kernels are scalar loops (``masked_fill_`` with a 152k-token mask costs
0.3-0.9 ms here, worse the more irregular the mask), whereas integer kernels are vectorised. With
the logits viewed as integers of the same width, ``((x ^ NEG_INF) * allowed) ^ NEG_INF`` is ``x``
where ``allowed`` is 1 and the bits of ``-inf`` where it is 0 — bit-exact for every ``x``, NaN,
``±inf`` and ``-0.0`` included — in three in-place passes, several times faster.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import torch

BITMASK_DTYPE = torch.int32
"""The dtype of a token bitmask (int32 rather than uint32, which older torch cannot shift)."""

_BITS_PER_WORD = 32
_LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_SAME_WIDTH_INT = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float64: torch.int64,
}
# On the CPU, rows are masked in groups of about this many tokens (2 MB of float32 logits), so that the
# three passes over a group run in cache: at batch 32 of a 152k vocabulary this is ~1.5x faster than
# passes over the whole batch, and larger or smaller groups measured no better.
_CPU_TOKENS_PER_GROUP = 1 << 19

Indices: TypeAlias = Sequence[int] | torch.Tensor | np.ndarray
TritonApply: TypeAlias = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None, int], None]


def bitmask_width(vocab_size: int) -> int:
    """Number of int32 words in one bitmask row of a ``vocab_size``-token vocabulary."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return (vocab_size + _BITS_PER_WORD - 1) // _BITS_PER_WORD


def allocate_token_bitmask(
    batch_size: int, vocab_size: int, *, device: torch.device | str = "cpu", pin_memory: bool = False
) -> torch.Tensor:
    """A ``[batch_size, ceil(vocab_size / 32)]`` int32 bitmask with every token allowed.

    ``pin_memory=True`` page-locks a CPU bitmask so that its copy to an accelerator can overlap with
    the forward pass. It is a request, not a requirement: where no accelerator exists (nothing to
    overlap with) the bitmask is ordinary memory, so callers can ask for it unconditionally.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    device = torch.device(device)
    if pin_memory and device.type != "cpu":
        raise ValueError(f"pin_memory only applies to CPU bitmasks, not to {device}")
    pin = pin_memory and _accelerator_available()
    shape = (batch_size, bitmask_width(vocab_size))
    return torch.full(shape, -1, dtype=BITMASK_DTYPE, device=device, pin_memory=pin)


def reset_token_bitmask(bitmask: torch.Tensor) -> None:
    """Allow every token again (fill with ``-1``), in place."""
    _as_bitmask(bitmask).fill_(-1)


def apply_token_bitmask_(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    *,
    indices: Indices | None = None,
    vocab_size: int | None = None,
) -> None:
    """Set ``logits[r, i] = -inf`` for every token ``i`` that row ``r`` of ``bitmask`` forbids, in place.

    Semantics are XGrammar's ``apply_token_bitmask_inplace`` with one deliberate difference
    (padding, below), so that code written for it behaves the same here:

    - ``logits`` is ``[batch, V]`` or ``[V]`` (one row); float32, float16, bfloat16 or float64; on
      any device. ``bitmask`` is int32 ``[batch, W]`` or ``[W]``. Without ``indices`` both have the
      same number of rows and logits row ``r`` is masked by bitmask row ``r``.
    - ``indices``: only the listed rows are masked, and row ``r = indices[j]`` of the logits is masked
      by row ``r`` of the bitmask — the *same* index into both, exactly as in XGrammar, not row ``j``
      of the bitmask. The two may then have different numbers of rows (a bitmask preallocated for the
      largest batch, a mixed batch whose unconstrained rows are left alone); every index must be a
      valid row of both. Duplicates are harmless; an empty ``indices`` masks nothing.
    - ``vocab_size`` (the real vocabulary size) defaults to ``min(V, 32 * W)``. Bits at and beyond it
      are ignored, and logits columns at and beyond it are set to ``-inf``: a model's padded output
      columns (``V > 32 * W``, e.g. Qwen2.5's 151,936 logits for 151,665 tokens) are tokens no
      grammar can produce. XGrammar leaves those columns untouched; here they are never allowed.
      A bitmask wider than the logits (``32 * W > V``) is fine: its extra bits are ignored.
    - Device: a bitmask on another device (the usual case: filled on the CPU, logits on CUDA) is
      copied to the logits' device, with ``non_blocking=True`` towards an accelerator. When the
      bitmask is pinned that copy is asynchronous: do not overwrite the bitmask until the stream has
      passed this point (any later read of a result on the host, such as the sampled token, ensures
      it), or double-buffer it. On CUDA a Triton kernel does the work when Triton imports; otherwise
      (and on every other device) a vectorised torch implementation does.

    Raises ValueError for any input that would otherwise give a wrong answer silently: wrong
    dtypes, ranks or row counts, a ``vocab_size`` the bitmask or the logits do not cover, indices
    out of range.
    """
    rows2d, words = _check_operands(logits, bitmask)
    vocab = _resolve_vocab_size(vocab_size, rows2d.shape[1], words.shape[1])
    selected = None if indices is None else _check_indices(indices, rows2d.shape[0], words.shape[0])
    if selected is None and rows2d.shape[0] != words.shape[0]:
        raise ValueError(
            f"logits have {rows2d.shape[0]} rows but the bitmask has {words.shape[0]}; "
            "pass indices= to mask a subset of rows"
        )
    if selected is not None and selected.numel() == 0:
        return
    if words.device != rows2d.device:
        words = words.to(rows2d.device, non_blocking=rows2d.device.type != "cpu")
    kernel = _triton_apply() if rows2d.device.type == "cuda" and rows2d.stride(1) == 1 else None
    if kernel is not None:
        device_rows = None if selected is None else selected.to(rows2d.device, non_blocking=True)
        kernel(rows2d, words.contiguous(), device_rows, vocab)
    else:
        _apply_torch(rows2d, words, selected, vocab)


def pack_bool_mask(allowed: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Pack a bool mask ``[..., V]`` (True = allowed) into int32 bitmask words ``[..., ceil(V / 32)]``.

    ``out`` (int32, that shape, e.g. ``bitmask[row].numpy()``) receives the words and is returned;
    bits past ``V`` in the last word are 0 (forbidden).
    """
    if not isinstance(allowed, np.ndarray) or allowed.dtype != np.bool_:
        raise ValueError(f"allowed must be a numpy bool array, got {_describe(allowed)}")
    if allowed.ndim == 0 or allowed.shape[-1] == 0:
        raise ValueError(f"allowed must have a non-empty last (vocabulary) axis, got shape {allowed.shape}")
    packed = np.packbits(allowed, axis=-1, bitorder="little")
    n_bytes = bitmask_width(allowed.shape[-1]) * 4
    if packed.shape[-1] != n_bytes:
        padded = np.zeros((*packed.shape[:-1], n_bytes), dtype=np.uint8)
        padded[..., : packed.shape[-1]] = packed
        packed = padded
    words = packed.view("<i4").astype(np.int32, copy=False)
    if out is None:
        return words
    if not isinstance(out, np.ndarray) or out.dtype != np.int32 or out.shape != words.shape:
        raise ValueError(f"out must be an int32 array of shape {words.shape}, got {_describe(out)}")
    np.copyto(out, words)
    return out


def unpack_bitmask(words: np.ndarray, vocab_size: int) -> np.ndarray:
    """The bool mask ``[..., vocab_size]`` (True = allowed) of int32 bitmask words ``[..., W]``."""
    if not isinstance(words, np.ndarray) or words.dtype != np.int32 or words.ndim == 0:
        raise ValueError(f"words must be an int32 numpy array, got {_describe(words)}")
    if not 0 <= vocab_size <= words.shape[-1] * _BITS_PER_WORD:
        raise ValueError(f"vocab_size {vocab_size} does not fit in {words.shape[-1]} words per row")
    as_bytes = np.ascontiguousarray(words, dtype="<i4").view(np.uint8)
    return np.unpackbits(as_bytes, axis=-1, count=vocab_size, bitorder="little").view(np.bool_)


@functools.lru_cache(maxsize=16)
def stop_row(stop_token_ids: frozenset[int], vocab_size: int) -> np.ndarray:
    """`pack_ids` of a vocabulary's stop tokens, made once per vocabulary and read-only: every
    compiled grammar's masks OR it in, and made per compile it was a fortieth of a schema's."""
    row = pack_ids(np.array(sorted(stop_token_ids), dtype=np.int64), vocab_size)
    row.flags.writeable = False
    return row


def pack_ids(token_ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """A bitmask row with exactly ``token_ids`` set, as uint32 words (the engine's view of the row).

    A few ids (a matcher's stop tokens, made per grammar) are set one by one; many go through a
    boolean row, which costs a pass over the whole vocabulary (50 µs for Llama-3)."""
    if len(token_ids) and not 0 <= int(np.min(token_ids)) <= int(np.max(token_ids)) < vocab_size:
        raise ValueError(f"token ids must be in [0, {vocab_size}): got one outside it")
    if len(token_ids) <= _FEW_IDS:
        words = np.zeros(bitmask_width(vocab_size), dtype=np.uint32)
        set_bits(words, np.asarray(token_ids))
        return words
    allowed = np.zeros(bitmask_width(vocab_size) * _BITS_PER_WORD, dtype=bool)
    allowed[token_ids] = True
    return pack_bool_mask(allowed).view(np.uint32)


_FEW_IDS = 64


def set_bits(words: np.ndarray, token_ids: np.ndarray) -> None:
    """Set the bits of ``token_ids`` in a uint32 bitmask row, in place."""
    if len(token_ids):
        ids = token_ids.astype(np.uint32)
        np.bitwise_or.at(words, ids >> 5, np.left_shift(np.uint32(1), ids & np.uint32(31)))


# --- validation --------------------------------------------------------------------------------


def host_array(bitmask: Any) -> np.ndarray:
    """The numpy array over a CPU bitmask's memory, to write a mask into now: a numpy bitmask
    itself, or a torch tensor's memory, made once for a tensor that comes back with the same
    memory and layout.

    A matcher writes its mask into the caller's bitmask at every step, and ``Tensor.numpy()`` costs
    4-8 µs when warm and about 80 µs right after a mask's walk of the vocabulary has taken the
    processor's caches: most of a remembered mask, a tenth of a new one. A tensor seen a second time
    (a decoding loop's bitmask, not a slice made per call) gets an alias of its memory, handed out
    only for the same live tensor with the same data pointer, dtype, shape and strides. The alias
    does not keep the tensor alive (the registry would keep every bitmask alive otherwise): use it
    while you hold the tensor, never after."""
    if isinstance(bitmask, np.ndarray):
        return bitmask
    if not (callable(getattr(bitmask, "numpy", None)) and hasattr(bitmask, "device")):
        raise TypeError(f"bitmask must be an int32 numpy array or torch tensor, got {type(bitmask).__name__}")
    layout = _layout(bitmask)
    found = _HOST_ARRAYS.get(id(bitmask)) if layout is not None else None
    seen = False
    if found is not None and found[0]() is bitmask and found[1] == layout:
        if found[2] is not None:
            return found[2]
        seen = True
    if bitmask.device.type != "cpu":
        raise ValueError("fill the bitmask on the CPU (allocate_token_bitmask) and copy it to the device")
    array: np.ndarray = bitmask.numpy()
    if layout is None:
        return array
    alias = None
    if seen and array.flags.c_contiguous and array.nbytes:
        memory = (ctypes.c_char * array.nbytes).from_address(layout[0])
        alias = np.frombuffer(memoryview(memory).cast("B"), dtype=array.dtype).reshape(array.shape)
        alias.flags.writeable = array.flags.writeable
    _remember(bitmask, layout, alias)
    return array if alias is None else alias


_Layout: TypeAlias = tuple[int, object, tuple[int, ...], tuple[int, ...]]


def _layout(bitmask: Any) -> _Layout | None:
    """A tensor's data pointer, dtype, shape and strides (None where it has none: a sparse tensor,
    an object that is not a torch tensor)."""
    try:
        return (int(bitmask.data_ptr()), bitmask.dtype, tuple(bitmask.shape), tuple(bitmask.stride()))
    except (AttributeError, RuntimeError, TypeError):
        return None


def _remember(bitmask: Any, layout: _Layout, alias: np.ndarray | None) -> None:
    """Keep a tensor's entry; past `_HOST_ARRAYS_KEPT`, the entries of tensors that are gone leave
    first (slices made per call), then the oldest."""
    with _HOST_ARRAYS_LOCK:  # (matchers of several threads insert and evict at once)
        _HOST_ARRAYS.pop(id(bitmask), None)
        _HOST_ARRAYS[id(bitmask)] = (weakref.ref(bitmask), layout, alias)
        if len(_HOST_ARRAYS) > _HOST_ARRAYS_KEPT:
            for key in [key for key, entry in _HOST_ARRAYS.items() if entry[0]() is None]:
                del _HOST_ARRAYS[key]
        while len(_HOST_ARRAYS) > _HOST_ARRAYS_KEPT:
            del _HOST_ARRAYS[next(iter(_HOST_ARRAYS))]


# The host arrays of recent bitmask tensors (`host_array`), by the tensor's id: (the tensor, weakly;
# its layout; its alias, None until it is seen a second time).
_HOST_ARRAYS: dict[int, tuple[weakref.ref[Any], _Layout, np.ndarray | None]] = {}
_HOST_ARRAYS_KEPT = 64
_HOST_ARRAYS_LOCK = threading.Lock()


def _as_bitmask(bitmask: object) -> torch.Tensor:
    if not isinstance(bitmask, torch.Tensor) or bitmask.dtype != BITMASK_DTYPE:
        raise ValueError(f"bitmask must be an int32 torch tensor, got {_describe(bitmask)}")
    return bitmask


def _check_operands(logits: object, bitmask: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Both operands as 2-D views, after checking their types and ranks."""
    if not isinstance(logits, torch.Tensor) or logits.dtype not in _LOGIT_DTYPES:
        raise ValueError(f"logits must be a float32/float16/bfloat16/float64 tensor, got {_describe(logits)}")
    if logits.dim() not in (1, 2) or logits.shape[-1] == 0:
        raise ValueError(f"logits must be [batch, vocab] or [vocab] with vocab > 0, got shape {tuple(logits.shape)}")
    bitmask = _as_bitmask(bitmask)
    if bitmask.dim() not in (1, 2) or bitmask.shape[-1] == 0:
        raise ValueError(f"bitmask must be [batch, words] or [words], got shape {tuple(bitmask.shape)}")
    return logits.unsqueeze(0) if logits.dim() == 1 else logits, bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask


def _resolve_vocab_size(vocab_size: int | None, n_logits: int, n_words: int) -> int:
    covered = n_words * _BITS_PER_WORD
    if vocab_size is None:
        return min(n_logits, covered)
    if not 1 <= vocab_size <= min(n_logits, covered):
        raise ValueError(
            f"vocab_size {vocab_size} must be in [1, {min(n_logits, covered)}]: the logits have {n_logits} "
            f"columns and the bitmask covers {covered} tokens"
        )
    return vocab_size


def _check_indices(indices: Indices, n_logits_rows: int, n_bitmask_rows: int) -> torch.Tensor:
    """``indices`` as a 1-D int64 tensor (on the device it came on), every entry a valid row of both."""
    rows = indices if isinstance(indices, torch.Tensor) else _host_indices(indices)
    if rows.dim() != 1 or rows.dtype == torch.bool or rows.dtype.is_floating_point or rows.dtype.is_complex:
        raise ValueError(f"indices must be a 1-D sequence of ints, got {_describe(rows)}")
    if rows.numel() == 0:
        return rows.long()
    limit = min(n_logits_rows, n_bitmask_rows)
    lowest, highest = (int(v) for v in torch.aminmax(rows))
    if lowest < 0 or highest >= limit:
        bad = lowest if lowest < 0 else highest
        raise ValueError(
            f"index {bad} is not a row of both the logits ({n_logits_rows} rows) "
            f"and the bitmask ({n_bitmask_rows} rows)"
        )
    return rows.long()


def _host_indices(indices: Sequence[int] | np.ndarray) -> torch.Tensor:
    try:
        array = np.asarray(indices)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"indices must be a 1-D sequence of ints, got {indices!r}") from exc
    if array.ndim != 1:
        raise ValueError(f"indices must be a 1-D sequence of ints, got {indices!r}")
    if array.size == 0:
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"indices must be a 1-D sequence of ints, got {_describe(array)}")
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor | np.ndarray):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return type(value).__name__


def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


# --- torch implementation ----------------------------------------------------------------------


def _apply_torch(logits: torch.Tensor, words: torch.Tensor, rows: torch.Tensor | None, vocab_size: int) -> None:
    """Mask all rows, or the listed ``rows``, through views of the logits where possible.

    On the CPU, listed rows are masked in place through slices (runs of consecutive rows together),
    which is cheaper than copying them out and back; rows go in cache-sized groups. On an accelerator
    the listed rows are gathered, masked and scattered back in one go, without a host round trip.
    """
    if rows is not None and logits.device.type != "cpu":
        _apply_gathered(logits, words, rows.to(logits.device), vocab_size)
        return
    group = max(1, _CPU_TOKENS_PER_GROUP // logits.shape[1]) if logits.device.type == "cpu" else logits.shape[0]
    for first, stop in _runs(rows, logits.shape[0]):
        for start in range(first, stop, group):
            end = min(start + group, stop)
            _mask_rows_(logits[start:end], words[start:end], vocab_size)


def _apply_gathered(logits: torch.Tensor, words: torch.Tensor, rows: torch.Tensor, vocab_size: int) -> None:
    """Mask the listed rows by gathering them, masking the copy and scattering it back."""
    selected = logits.index_select(0, rows)
    _mask_rows_(selected, words.index_select(0, rows), vocab_size)
    logits.index_copy_(0, rows, selected)


def _runs(rows: torch.Tensor | None, n_rows: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges covering exactly the distinct ``rows`` (all ``n_rows`` rows when None)."""
    if rows is None:
        return [(0, n_rows)]
    distinct = np.unique(rows.cpu().numpy())
    breaks = np.flatnonzero(np.diff(distinct) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [len(distinct)]))
    return [(int(distinct[i]), int(distinct[j - 1]) + 1) for i, j in zip(starts, stops, strict=True)]


def _mask_rows_(logits: torch.Tensor, words: torch.Tensor, vocab_size: int) -> None:
    """Mask ``logits[r]`` with ``words[r]`` for every row, in place, with integer ops on the logits' bits.

    ``((x ^ NEG_INF) * allowed) ^ NEG_INF`` is ``x`` where ``allowed`` is 1 and ``NEG_INF`` where it is
    0, for every bit pattern ``x`` (a product by 0 or 1 cannot overflow).
    """
    if logits.shape[1] > vocab_size:
        logits[:, vocab_size:].fill_(float("-inf"))
    allowed = _allowed_tokens(words, vocab_size)
    neg_inf = _neg_inf_bits(logits.dtype)
    bits = logits[:, :vocab_size].view(_SAME_WIDTH_INT[logits.dtype])
    bits.bitwise_xor_(neg_inf).mul_(allowed).bitwise_xor_(neg_inf)


def _allowed_tokens(words: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[rows, vocab_size]`` tensor, nonzero exactly where a token is allowed, on the words' device."""
    if words.device.type == "cpu":  # numpy's unpackbits is several times faster than torch's shifts
        return torch.from_numpy(unpack_bitmask(words.numpy(), vocab_size))
    return _allowed_tokens_torch(words, vocab_size)


def _allowed_tokens_torch(words: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """:func:`_allowed_tokens` with torch ops alone, for devices numpy cannot read."""
    n_words = bitmask_width(vocab_size)
    shifted = words[:, :n_words].unsqueeze(-1) >> _bit_positions(words.device)
    return (shifted & 1).flatten(1)[:, :vocab_size]


@functools.cache
def _bit_positions(device: torch.device) -> torch.Tensor:
    return torch.arange(_BITS_PER_WORD, dtype=BITMASK_DTYPE, device=device)


@functools.cache
def _neg_inf_bits(dtype: torch.dtype) -> int:
    """The bit pattern of ``-inf`` in ``dtype``, as a signed integer of the same width."""
    return int(torch.tensor(float("-inf"), dtype=dtype).view(_SAME_WIDTH_INT[dtype]))


# --- Triton ------------------------------------------------------------------------------------


@functools.cache
def _triton_apply() -> TritonApply | None:
    """The Triton implementation, or None where Triton does not import (then torch does the work)."""
    try:
        from codemask.engine.bitmask_triton import apply_token_bitmask_triton
    except ImportError:
        return None
    return apply_token_bitmask_triton

"""Triton kernel that applies a token bitmask to logits on the GPU, in place.

Imported lazily by :mod:`codemask.engine.bitmask` when logits live on CUDA: importing this module
imports Triton, which a CPU-only install need not have. With ``TRITON_INTERPRET=1`` set before
Triton is imported, the same kernel runs on CPU tensors, which is how the tests check it without a GPU.

Callers validate: this module trusts its arguments (see ``apply_token_bitmask_`` for the semantics).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Words of the bitmask per program: 128 words = 4,096 tokens, a 16 KB float32 tile of logits.
_WORDS_PER_PROGRAM = 128


@triton.jit
def _apply_token_bitmask_kernel(
    logits_ptr,
    bitmask_ptr,
    rows_ptr,
    logits_row_stride,
    bitmask_row_stride,
    n_columns,
    vocab_size,
    HAS_ROWS: tl.constexpr,
    WORDS: tl.constexpr,
):
    """One program masks ``32 * WORDS`` consecutive columns of one logits row.

    The tile is ``[WORDS, 32]``: row ``w`` of the tile holds the 32 tokens of word ``w``, so every word
    is loaded once and its bits are tested by a broadcast shift, and consecutive lanes store to
    consecutive addresses. Only forbidden positions are written; allowed logits are never touched.
    """
    row = tl.load(rows_ptr + tl.program_id(0)).to(tl.int64) if HAS_ROWS else tl.program_id(0).to(tl.int64)
    word = tl.program_id(1) * WORDS + tl.arange(0, WORDS)
    n_words = (vocab_size + 31) // 32
    words = tl.load(bitmask_ptr + row * bitmask_row_stride + word, mask=word < n_words, other=0)
    bit = tl.arange(0, 32)
    column = word[:, None] * 32 + bit[None, :]
    allowed = (((words[:, None] >> bit[None, :]) & 1) != 0) & (column < vocab_size)
    neg_inf = tl.full([WORDS, 32], float("-inf"), logits_ptr.dtype.element_ty)
    tl.store(logits_ptr + row * logits_row_stride + column, neg_inf, mask=(column < n_columns) & ~allowed)


def apply_token_bitmask_triton(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None, vocab_size: int
) -> None:
    """Mask 2-D ``logits`` (unit column stride) with the int32 ``bitmask`` (contiguous rows) in place.

    ``rows`` (on the logits' device) lists the rows to mask, each masked by the bitmask row of the same
    index; None masks every row. Columns at and beyond ``vocab_size`` become ``-inf``.
    """
    n_rows = logits.shape[0] if rows is None else rows.numel()
    if n_rows == 0:
        return
    tokens_per_program = 32 * _WORDS_PER_PROGRAM
    grid = (n_rows, triton.cdiv(logits.shape[1], tokens_per_program))
    _apply_token_bitmask_kernel[grid](
        logits,
        bitmask,
        bitmask if rows is None else rows,
        logits.stride(0),
        bitmask.stride(0),
        logits.shape[1],
        vocab_size,
        HAS_ROWS=rows is not None,
        WORDS=_WORDS_PER_PROGRAM,
    )

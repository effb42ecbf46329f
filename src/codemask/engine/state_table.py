"""Transition tables with a row per interned state, filled in as states are met.

Parser and lexer cores memoise their transitions in an int32 table, one row of 256 (or alphabet
many) entries per state, which grows while a grammar is in use — in the middle of decoding. Growing
it by copying into a fresh, pre-filled array touched every page of the new table at once: 7 ms at
4,096 states and 16 ms at 8,192 on a machine where a page fault costs microseconds (a virtual
machine whose host backs memory lazily), and numpy asks for huge pages for arrays of 4 MB and
more, so the first write into each 2 MB cleared a whole huge page at once (4-5 ms). So a table
reserves room for many states as address space, and each state writes its own row when it is
interned: memory is taken page by page as it is used.

Even page by page, first touches were most of the cost of a walk that meets thousands of new
states (a counted string's positions: 578 page faults, 3.5 of 4.6 ms). So the memory of a table
whose core is gone goes back to a small pool, and the next table (the next request's grammar)
starts on pages that are already there.
"""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy as np

# States a table has room for before it must move (then it doubles): address space, not memory.
RESERVED_STATES = 16384
# Bytes of dead tables' memory kept for new tables (resident: their touched pages stay so).
POOL_BYTES = 64 << 20

_pool: list[mmap.mmap] = []
_pool_lock = threading.Lock()


def unwritten_rows(rows: int, width: int) -> np.ndarray:
    """An int32 ``[rows, width]`` array whose memory is taken page by page as it is written (its
    contents are undefined until then: ordinary pages of its own, or a dead table's)."""
    size = max(rows * width * 4, 1)
    buffer = _pooled(size) or mmap.mmap(-1, size)
    table = np.frombuffer(buffer, dtype=np.int32, count=rows * width).reshape(rows, width)
    weakref.finalize(table, _give_back, buffer).atexit = False  # (at exit the table may still be in use)
    return table


def grown(table: np.ndarray) -> np.ndarray:
    """``table`` with twice the rows, the new ones unwritten."""
    bigger = unwritten_rows(2 * len(table), table.shape[1])
    bigger[: len(table)] = table
    return bigger


def _pooled(size: int) -> mmap.mmap | None:
    with _pool_lock:
        for i, buffer in enumerate(_pool):
            if len(buffer) == size:
                return _pool.pop(i)
    return None


def _give_back(buffer: mmap.mmap) -> None:
    """Keep a dead table's memory for the next table of its size, within `POOL_BYTES` (else it is
    unmapped once the dying array lets go of it)."""
    with _pool_lock:
        if sum(map(len, _pool)) + len(buffer) <= POOL_BYTES:
            _pool.append(buffer)

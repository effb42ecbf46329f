"""Transition tables with a row per interned state, filled in as states are met.

Parser and lexer cores memoise their transitions in an int32 table, one row of 256 (or alphabet
many) entries per state, which grows while a grammar is in use — in the middle of decoding. Growing
it by copying into a fresh, pre-filled array touched every page of the new table at once: 7 ms at
4,096 states and 16 ms at 8,192 on a machine where a page fault costs microseconds (a virtual
machine whose host backs memory lazily), and numpy asks for huge pages for arrays of 4 MB and
more, so the first write into each 2 MB cleared a whole huge page at once (4-5 ms). So a table
reserves room for many states as address space, and each state writes its own row when it is
interned: memory is taken page by page as it is used.

A grammar's automaton (`RTN.trans`, 15 MB for a large schema) is made in the same memory: huge
pages cost the same 4-5 ms per 2 MB there.
"""

from __future__ import annotations

import mmap

import numpy as np

# States a table has room for before it must move (then it doubles): address space, not memory.
RESERVED_STATES = 16384
# The size from which numpy asks the kernel for huge pages (``madvise``).
HUGE_PAGES_FROM = 4 << 20


def unwritten_rows(rows: int, width: int, *, whole: bool = False) -> np.ndarray:
    """An int32 ``[rows, width]`` array whose memory is taken page by page as it is written (its
    contents are undefined until then): from 4 MB on, where numpy's own allocation asks for huge
    pages, anonymous memory of its own in ordinary pages; below, numpy's (often pages the process
    already has). ``whole``: every row is about to be written, so the pages are all taken at once
    (in one call into the kernel: half the cost of a fault per page)."""
    if rows * width * 4 < HUGE_PAGES_FROM or not hasattr(mmap, "MAP_ANONYMOUS"):  # (POSIX only)
        return np.empty((rows, width), dtype=np.int32)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (getattr(mmap, "MAP_POPULATE", 0) if whole else 0)
    buffer = mmap.mmap(-1, rows * width * 4, flags=flags)
    return np.frombuffer(buffer, dtype=np.int32, count=rows * width).reshape(rows, width)


def grown(table: np.ndarray) -> np.ndarray:
    """``table`` with twice the rows, the new ones unwritten."""
    bigger = unwritten_rows(2 * len(table), table.shape[1])
    bigger[: len(table)] = table
    return bigger

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

A server compiles a grammar per request and drops it when the request ends. The memory of a
dropped table (`SpareTables`) goes to the next table made, whose writes then find their pages
already there (25-50 ns a page rather than 1-3 us for a fresh one): the states a mask interns
and the automaton a compile writes cost no page faults once the process has served a few
requests.
"""

from __future__ import annotations

import collections
import mmap
import threading
import weakref

import numpy as np

# States a table has room for before it must move (then it doubles): address space, not memory.
RESERVED_STATES = 16384
# The size from which numpy asks the kernel for huge pages (``madvise``).
HUGE_PAGES_FROM = 4 << 20


# What `SpareTables` keeps of dropped tables: at most this many buffers and this many bytes of
# address space (of which only the pages their tables wrote are memory).
SPARE_BUFFERS = 4
SPARE_BYTES = 96 << 20


class SpareTables:
    """The anonymous memory of tables no longer referenced, for the next tables to write into.

    A table's buffer comes back when the last view of it is freed (a finalizer: it only appends,
    so that it may run from the garbage collector anywhere, even inside `take`); `take` gives the smallest
    buffer kept that holds the size asked for and is at most twice it. Kept buffers are not
    handed back to the kernel (``MADV_FREE`` cost half a millisecond per 16 MB, paid wherever the
    collector happened to free a grammar, and the next write to each page faulted anyway): what is
    kept is memory the process already had, bounded by `SPARE_BUFFERS` and `SPARE_BYTES`.
    """

    def __init__(self) -> None:
        self._kept: collections.deque[mmap.mmap] = collections.deque()
        self._lock = threading.Lock()

    def take(self, size: int) -> mmap.mmap | None:
        """A kept buffer of ``size`` to twice that many bytes (the smallest), no longer kept."""
        with self._lock:
            fitting = [buffer for buffer in list(self._kept) if size <= len(buffer) <= 2 * size]
            if not fitting:
                return None
            best = min(fitting, key=len)
            self._kept.remove(best)
            return best

    def keep(self, buffer: mmap.mmap) -> None:
        """Keep ``buffer`` (its table was freed) if there is room."""
        kept = list(self._kept)
        if len(kept) < SPARE_BUFFERS and sum(map(len, kept)) + len(buffer) <= SPARE_BYTES:
            self._kept.append(buffer)

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


SPARE_TABLES = SpareTables()


def unwritten_rows(rows: int, width: int, *, whole: bool = False) -> np.ndarray:
    """An int32 ``[rows, width]`` array whose memory is taken page by page as it is written (its
    contents are undefined until then): from 4 MB on, where numpy's own allocation asks for huge
    pages, anonymous memory of its own in ordinary pages, a dropped table's where one fits
    (`SpareTables`); below, numpy's (often pages the process already has). ``whole``: every row is
    about to be written, so fresh pages are all taken at once (in one call into the kernel: half
    the cost of a fault per page)."""
    size = rows * width * 4
    if size < HUGE_PAGES_FROM or not hasattr(mmap, "MAP_ANONYMOUS"):  # (POSIX only)
        return np.empty((rows, width), dtype=np.int32)
    buffer = SPARE_TABLES.take(size)
    if buffer is None:
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (getattr(mmap, "MAP_POPULATE", 0) if whole else 0)
        buffer = mmap.mmap(-1, size, flags=flags)
    flat = np.frombuffer(buffer, dtype=np.int32, count=rows * width)
    # (on the array made from the buffer, the base of every view of the table: the buffer is kept
    # for another table only once no view is left)
    weakref.finalize(flat, SPARE_TABLES.keep, buffer).atexit = False
    return flat.reshape(rows, width)


def grown(table: np.ndarray) -> np.ndarray:
    """``table`` with twice the rows, the new ones unwritten."""
    bigger = unwritten_rows(2 * len(table), table.shape[1])
    bigger[: len(table)] = table
    return bigger

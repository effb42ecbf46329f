"""The C trie walk (`codemask.engine._native`, built by setup.py where a C compiler exists).

The first visit of a wide position walks most of the vocabulary's trie; in numpy that is a few
dozen array steps per trie level and 5–50 ms, in C one depth-first loop and well under a
millisecond. The extension is optional: without it (no compiler when installed, or a build
older than this source) the numpy walk in `mask_cache` runs instead, with the same results (the
tests compare the two). ``CODEMASK_NATIVE=0`` turns it off.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import numpy as np

from codemask.engine.parser import ParserCore
from codemask.engine.token_trie import FlatTrie

# The C module's VERSION this source expects (bump both together when the interface changes).
EXPECTED_VERSION = 1


def _load() -> ModuleType | None:
    try:
        from codemask.engine import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    if getattr(_native, "VERSION", None) != EXPECTED_VERSION:
        warnings.warn("codemask.engine._native is out of date (reinstall codemask to rebuild it); "
                      "masks are computed with numpy", RuntimeWarning, stacklevel=2)
        return None
    return _native


_MODULE = _load()
_enabled = _MODULE is not None and os.environ.get("CODEMASK_NATIVE", "1") != "0"


def enabled() -> bool:
    """Whether mask computations use the C walk."""
    return _enabled


def available() -> bool:
    """Whether the C walk was built and loaded (enabled or not)."""
    return _MODULE is not None


@contextmanager
def using(native: bool) -> Iterator[None]:
    """Use the C walk (if available) or the numpy one inside the block (tests compare them)."""
    global _enabled
    before = _enabled
    _enabled = native and _MODULE is not None
    try:
        yield
    finally:
        _enabled = before


def walk(core: ParserCore, flat: FlatTrie, nodes: np.ndarray, states: np.ndarray,
         owners: np.ndarray) -> list[np.ndarray]:
    """Consume trie nodes ``nodes`` (flat ids) from parser ``states`` and everything below them.

    Returns int32 arrays: ok (owner, sorted token), exit (owner, token range lo, hi, depth).
    Transitions the table does not know yet are computed between rounds of the C walk.
    """
    assert _MODULE is not None
    parts: list[tuple[np.ndarray, ...]] = []
    nodes, states, owners = (np.ascontiguousarray(a, dtype=np.int32) for a in (nodes, states, owners))
    while len(nodes):
        with core.lock:  # the table only grows under the lock; read a consistent one
            found = _MODULE.walk(core.table, core.alphabet, core.flags, core.has_stacks, flat.byte, flat.lo,
                                 flat.hi, flat.token, flat.child_lo, flat.child_hi, flat.depth, nodes, states,
                                 owners)
        arrays = tuple(np.frombuffer(b, dtype=np.int32) for b in found)
        parts.append(arrays[:6])
        nodes, states, owners = arrays[6:]
        if len(nodes):
            core.fill_rows(np.unique(states))
    return [np.concatenate([p[i] for p in parts]) for i in range(6)]

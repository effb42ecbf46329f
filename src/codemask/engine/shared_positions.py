"""Position classifications shared between grammars: rules with equal digests (of their
automaton and every rule they call) classify the vocabulary the same way.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from codemask.engine.automaton import RTN, RuleCalls
from codemask.engine.token_trie import TokenTrie
from codemask.engine.uncertain import Uncertain

# How many filtered records `SharedPositions.followed` keeps (a string's few follow sets, per kind
# of string met).
FOLLOWED_CAPACITY = 256


class SharedPositions:
    """Position classifications shared by every grammar of the process, per vocabulary trie.

    A position's classification depends only on its rule's automaton and those of the rules it
    calls (the frame is walked in isolation), plus the bytes that may follow the rule; generated
    grammars (JSON Schema) have the same string, number and whitespace rules again and again,
    so a server compiling a schema per request walks each of them once. Bounded, least recently
    used out first.
    """

    CAPACITY = 2048
    _by_trie: ClassVar[dict[int, tuple[TokenTrie, SharedPositions]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[object, ...], tuple[np.ndarray, Uncertain | None]] = OrderedDict()
        self._followed: OrderedDict[tuple[int, bytes], tuple[Uncertain, Uncertain | None]] = OrderedDict()
        self.hits = 0

    @classmethod
    def of(cls, trie: TokenTrie) -> SharedPositions:
        with cls._lock:
            found = cls._by_trie.get(id(trie))
            if found is None or found[0] is not trie:
                found = cls._by_trie[id(trie)] = (trie, cls())
            return found[1]

    def get(self, key: tuple[object, ...]) -> tuple[np.ndarray, Uncertain | None] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return found

    def clear(self) -> None:
        """Forget every shared position (the next grammars walk their own)."""
        with self._lock:
            self._entries.clear()
            self._followed.clear()

    def followed(self, unc: Uncertain, follow: bytes, restrict: Callable[[], Uncertain | None]) -> Uncertain | None:
        """``unc`` less the tokens whose residual begins with a byte ``follow`` (256 bytes of 0/1)
        does not hold: ``restrict()`` the first time for this record and these bytes. A shared
        position's record (and a bounded string's, `CharCounts.filtered`) is one object for every
        grammar, and grammars end their strings with the same few follow sets (``,``, ``}``, ``]``):
        filtering a free string's thousands of uncertain tokens again was half the first mask of a
        string value. Kept by the record's identity, with the record (so that the identity is not
        reused while kept)."""
        with self._lock:
            found = self._followed.get((id(unc), follow))
            if found is not None:
                self._followed.move_to_end((id(unc), follow))
                return found[1]
        restricted = restrict()
        with self._lock:
            self._followed[(id(unc), follow)] = (unc, restricted)
            if len(self._followed) > FOLLOWED_CAPACITY:
                self._followed.popitem(last=False)
        return restricted

    @classmethod
    def clear_all(cls) -> None:
        """`clear` the shared positions of every vocabulary."""
        with cls._lock:
            tables = [table for _trie, table in cls._by_trie.values()]
        for table in tables:
            table.clear()

    def put(self, key: tuple[object, ...], accepted: np.ndarray, uncertain: Uncertain | None) -> None:
        with self._lock:
            self._entries[key] = (accepted, uncertain)
            if len(self._entries) > self.CAPACITY:
                self._entries.popitem(last=False)


# Rules with more states than this, with those of the rules they call, are not shared between grammars:
# the digest hashes every one of them, and for an object's members (a key and the value's rules) it was
# most of the first mask after ``{"``, whose positions are narrow and cheap to walk. A free string (about
# 20 states), a number, a short enum stay under it.
MAX_SHARED_STATES = 48


class RuleSignatures:
    """Per rule, a digest of its automaton and, recursively, of every rule it calls.

    Equal digests mean equal frame-local behaviour, so positions can be shared between grammars.
    Rules that are recursive or call a recursive rule get None (their digest would need a fixed
    point; they are walked per grammar), and so do rules of more than `MAX_SHARED_STATES` states
    with the rules they call: what grammars share is strings, numbers and their like, small
    automata, while hashing a schema's start rule with everything it calls was most of the time
    of its first mask. Digests are made when first asked for (a position's rule and the rules it calls):
    hashing every rule of a large grammar took longer than its first masks.
    """

    def __init__(self, rtn: RTN, calls: RuleCalls) -> None:
        """``calls``: ``rtn.rule_calls(MAX_SHARED_STATES)``."""
        self.rtn = rtn
        count = len(rtn.rule_names)
        self._starts = rtn.rule_bounds[:count]
        self._ends = rtn.rule_bounds[1:]
        self._callee_lo = calls.callee_lo.tolist()
        self._callees = calls.callees
        self._unshared = calls.unshared.tolist()
        self._digests: dict[int, bytes] = {}

    def _callees_of(self, rule: int) -> list[int]:
        return self._callees[self._callee_lo[rule]:self._callee_lo[rule + 1]].tolist()

    def __getitem__(self, rule: int) -> bytes | None:
        if self._unshared[rule]:
            return None
        digests = self._digests
        todo = [rule]
        while todo:  # callees first (no recursion below a rule that does not reach any)
            top = todo[-1]
            callees = self._callees_of(top)
            missing = [c for c in callees if c not in digests]
            if missing:
                todo.extend(missing)
                continue
            todo.pop()
            if top not in digests:
                digests[top] = _rule_digest(self.rtn, top, self._starts[top], self._ends[top], callees, digests)
        return digests[rule]


def _rule_digest(rtn: RTN, rule: int, lo: int, hi: int, callees: list[int],
                 callee_digests: dict[int, bytes]) -> bytes:
    """The digest of rule ``rule`` (states ``lo:hi``, calling ``callees``, ascending): its
    transitions, accepting states and start, then per call (by state, then callee) the state, the
    callee's digest and the return state — laid out as arrays (a loop over every state of a large
    rule was most of a first mask).

    Where the rule was built in this process, its automaton's compile key stands for all that
    (equal keys, equal automata, the indices of the rules it calls included), with its callees'
    digests in the order of their indices: hashing a member rule's table took 0.1 ms, and a
    schema's first key position met a dozen of them."""
    key = rtn.rule_keys[rule] if rtn.rule_keys is not None else None
    if isinstance(key, tuple) and isinstance(key[0], bytes):  # (native.expr_digest, alphabet)
        h = hashlib.blake2b(key[0], digest_size=16, person=b"rule key")
        h.update(int(key[1]).to_bytes(4, "little"))
        for called in callees:
            h.update(callee_digests[called])
        return h.digest()
    call_lo, callee, ret = rtn.call_table
    first, last = int(call_lo[lo]), int(call_lo[hi])
    h = hashlib.blake2b(digest_size=16)
    trans = rtn.trans[lo:hi]
    h.update(np.where(trans >= 0, trans - lo, -1).astype(np.int32).tobytes())
    h.update(rtn.accepting[lo:hi].tobytes())
    h.update(int(rtn.rule_start[rule] - lo).to_bytes(4, "little"))
    if last > first:
        records = np.empty((last - first, 24), dtype=np.uint8)  # state, callee's digest, return state
        records[:, :4] = (rtn.call_sites[first:last] - lo).astype("<u4").view(np.uint8).reshape(-1, 4)
        digests = b"".join(callee_digests[c] for c in callee[first:last].tolist())
        records[:, 4:20] = np.frombuffer(digests, dtype=np.uint8).reshape(-1, 16)
        records[:, 20:] = (ret[first:last].astype(np.int64) - lo).astype("<u4").view(np.uint8).reshape(-1, 4)
        h.update(records.tobytes())
    return h.digest()

"""The disk cache is data, not code: a planted pickle never runs, a flipped bit never changes a
mask, an entry that fails to build is rebuilt and overwritten, the folder is private, files of
other users are ignored, and the folder stays under its size cap (least recently used first)."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar, GrammarCompiler
from codemask.engine import disk_cache
from codemask.engine.compiler import ARTIFACT_TYPES, CompiledArtifacts
from codemask.engine.disk_cache import DiskCache, cache_limit_bytes
from tests.engine.conftest import vocabulary
from tests.engine.test_compiler import masks_along

DOCUMENT = b'{"name": "x\\u00e9", "tags": [1, -2.5e3, true, null], "nested": {"a": [], "b": {}}}'


class Planted:
    """A pickle that makes a folder when loaded: what an attacker would plant in the cache."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.mkdir, (str(self.marker),)


def entry_files(folder: Path, key: str) -> list[Path]:
    return sorted(path for path in folder.iterdir() if path.name.startswith(key))


def test_a_planted_pickle_in_the_cache_never_runs(tmp_path: Path) -> None:
    """Guards the issue's exploit: a pickle written under the cache's predictable name ran on
    the next compile (`pickle.load` before any check). Planted under the entry's name with every
    suffix the cache has used, it is ignored and the grammar compiles as without it."""
    vocab, grammar = vocabulary("gpt2"), Grammar.builtin("json")
    compiler = GrammarCompiler(vocab, cache_dir=tmp_path / "cache", progress=False)
    key = compiler._key(grammar)
    marker = tmp_path / "pwned"
    (tmp_path / "cache").mkdir()
    for suffix in (".pkl", disk_cache.SUFFIX):
        (tmp_path / "cache" / f"{key}{suffix}").write_bytes(pickle.dumps(Planted(marker)))
    compiled = compiler.compile(grammar)
    assert not marker.exists()
    fresh = GrammarCompiler(vocab, cache_dir=False, progress=False).compile(grammar)
    assert (masks_along(compiled, DOCUMENT) == masks_along(fresh, DOCUMENT)).all()


def test_no_single_bit_flip_in_an_entry_changes_a_mask(tmp_path: Path) -> None:
    """Guards the checksum: on the pickled cache, 9 of 44 single-bit flips loaded silently and
    changed masks (one allowed `=".$_` inside an object), and 6 made every later compile fail.
    A bit is flipped in each of 64 regions of a real entry (magic, digest, header length, JSON
    header, arrays), one at a time: each compile gives a fresh compile's masks and leaves a sound
    entry behind."""
    vocab, grammar = vocabulary("gpt2"), Grammar.builtin("json")
    folder = tmp_path / "cache"
    want = masks_along(GrammarCompiler(vocab, cache_dir=False, progress=False).compile(grammar), DOCUMENT)
    first = GrammarCompiler(vocab, cache_dir=folder, progress=False)
    first.compile(grammar)
    key = first._key(grammar)
    (path,) = entry_files(folder, key)
    sound = path.read_bytes()
    header_end = 48 + int.from_bytes(sound[40:48], "little")
    offsets = sorted({*range(0, 48, 3), *np.linspace(48, header_end - 1, 24, dtype=int).tolist(),
                      *np.linspace(header_end, len(sound) - 1, 24, dtype=int).tolist()})
    assert len(offsets) >= 60
    for n, offset in enumerate(offsets):
        flipped = bytearray(sound)
        flipped[offset] ^= 1 << (n % 8)
        path.write_bytes(bytes(flipped))
        compiled = GrammarCompiler(vocab, cache_dir=folder, progress=False).compile(grammar)
        assert (masks_along(compiled, DOCUMENT) == want).all(), offset
        assert DiskCache(folder, 10**9).read(key, CompiledArtifacts, ARTIFACT_TYPES) is not None, offset
    assert entry_files(folder, key) == [path]


def test_an_entry_that_does_not_build_is_rebuilt_and_overwritten(tmp_path: Path) -> None:
    """Guards against a repeating error: an entry with a sound checksum whose automaton leads to
    a state out of range (what 6 of 44 flips made of a pickle: `ValueError: trans: a transition
    to an RTN state out of range` at every later compile) is rebuilt, and the file rewritten."""
    vocab, grammar = vocabulary("gpt2"), Grammar.from_regex(r"[a-z]+(, [a-z]+)*")
    folder = tmp_path / "cache"
    compiler = GrammarCompiler(vocab, cache_dir=folder, progress=False)
    good = compiler.compile(grammar)
    key = compiler._key(grammar)
    broken = good.artifacts
    assert broken.rtn.in_range  # (built here: its interners skip the check, which a read entry must pass)
    trans = broken.rtn.trans.copy()
    trans[trans >= 0] = broken.rtn.num_states + 5
    broken.rtn.trans = trans
    DiskCache(folder, 10**9).write(key, broken, ARTIFACT_TYPES)
    for _ in range(2):
        again = GrammarCompiler(vocab, cache_dir=folder, progress=False).compile(grammar)
        assert (masks_along(again, b"abc, de") == masks_along(good, b"abc, de")).all()
    rewritten = DiskCache(folder, 10**9).read(key, CompiledArtifacts, ARTIFACT_TYPES)
    assert rewritten is not None and int(rewritten.rtn.trans.max()) < rewritten.rtn.num_states
    assert not rewritten.rtn.in_range


def test_the_folder_is_private_and_other_users_entries_are_ignored(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder is made with mode 0700 (an existing one of ours is narrowed to it); an entry
    owned by another user is neither read nor evicted (here: this process pretends to be
    another user), and a link in place of an entry is not followed."""
    vocab, grammar = vocabulary("gpt2"), Grammar.from_regex("[a-c]+")
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    compiler = GrammarCompiler(vocab, cache_dir=folder, progress=False)
    compiler.compile(grammar)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    key = compiler._key(grammar)
    cache = DiskCache(folder, 10**9)
    assert cache.read(key, CompiledArtifacts, ARTIFACT_TYPES) is not None
    with monkeypatch.context() as patched:
        patched.setattr(os, "getuid", lambda: folder.stat().st_uid + 1)
        assert cache.read(key, CompiledArtifacts, ARTIFACT_TYPES) is None
        assert cache.entries() == [] and cache.clear() == (0, 0)
    assert cache.path(key).exists()
    target = tmp_path / "elsewhere.cmc"
    cache.path(key).rename(target)
    cache.path(key).symlink_to(target)
    assert cache.read(key, CompiledArtifacts, ARTIFACT_TYPES) is None


def test_the_cache_stays_under_its_cap_dropping_the_least_recently_used(tmp_path: Path) -> None:
    """Guards against unbounded growth (4 GB of pickles after a day): with a cap of a little more
    than two entries, compiling a third evicts the one least recently used — a read counts as a
    use — and the folder stays under the cap; files of older versions go first."""
    vocab = vocabulary("gpt2")
    folder = tmp_path / "cache"
    grammars = [Grammar.from_regex(pattern) for pattern in ("[a-c]+", "[d-f]+", "[g-i]+")]
    sizing = GrammarCompiler(vocab, cache_dir=tmp_path / "sizing", progress=False)
    sizing.compile(grammars[0])
    size = DiskCache(tmp_path / "sizing", 10**9).total_bytes()
    cap_mb = 2.5 * size / 1e6
    folder.mkdir()
    legacy = folder / "0123.pkl"
    legacy.write_bytes(b"x" * size)
    compiler = GrammarCompiler(vocab, cache_dir=folder, progress=False, max_cache_mb=cap_mb)
    keys = [compiler._key(g) for g in grammars]
    cache = DiskCache(folder, cache_limit_bytes(cap_mb))
    compiler.compile(grammars[0])
    os.utime(cache.path(keys[0]), (1, 1))  # long ago ...
    compiler.compile(grammars[1])
    os.utime(cache.path(keys[1]), (2, 2))
    assert not legacy.exists()
    assert GrammarCompiler(vocab, cache_dir=folder, progress=False, max_cache_mb=cap_mb).compile(grammars[0])
    compiler.compile(grammars[2])  # ... but just read: the second is the least recently used
    assert cache.path(keys[0]).exists() and cache.path(keys[2]).exists() and not cache.path(keys[1]).exists()
    assert cache.total_bytes() <= cache_limit_bytes(cap_mb)


def test_an_entry_larger_than_the_cap_is_not_written_and_limits_are_checked(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = vocabulary("gpt2")
    compiler = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False, max_cache_mb=0)
    assert compiler.compile(Grammar.from_regex("[a-z]+"))
    assert DiskCache(tmp_path, 0).entries() == []
    monkeypatch.setenv("CODEMASK_CACHE_MAX_MB", "1.5")
    assert cache_limit_bytes() == 1_500_000 and cache_limit_bytes(3) == 3_000_000
    monkeypatch.setenv("CODEMASK_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="CODEMASK_CACHE_MAX_MB must be a number of megabytes, got 'lots'"):
        GrammarCompiler(vocab, cache_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="max_cache_mb must be a finite number of megabytes >= 0, got -1"):
        cache_limit_bytes(-1)
    with pytest.raises(TypeError, match="max_cache_mb must be a number of megabytes, got str"):
        cache_limit_bytes("5")  # type: ignore[arg-type]


def test_the_format_round_trips_shared_objects_and_refuses_what_it_cannot_hold(tmp_path: Path) -> None:
    """Shared instances stay shared, tuples stay tuples, dict keys of any hashable shape come
    back; an object of an unnamed class, an object array or a cycle is refused when written."""
    from codemask.engine.lexer_masks import Residuals, ResidualSplit

    tails = Residuals(np.array([1], np.int32), np.array([0], np.int32), np.array([2], np.int32),
                      np.array([0]), index=0)
    split = ResidualSplit(np.array([True, False]), [(3, np.array([1]), tails, np.array([0]))])
    top = Residuals(np.array([4, 5], np.int32), np.array([1, 1], np.int32), np.array([3, 3], np.int32),
                    np.array([0, 1]), index=1, splits={(7, frozenset({1, 2})): split, 8: split})
    value = {b"k": [top, tails], "t": (1, 2.5, None, "s")}
    types = (Residuals, ResidualSplit)
    data = disk_cache.encode(value, "name", types)
    back = disk_cache.decode(bytearray(data), "name", types)
    assert isinstance(back, dict) and back["t"] == (1, 2.5, None, "s")
    top2, tails2 = back[b"k"]
    assert top2.splits[8] is top2.splits[(7, frozenset({1, 2}))]
    assert top2.splits[8].children[0][2] is tails2
    assert (top2.splits[8].accepted == split.accepted).all() and top2.splits[8].flags == split.flags
    with pytest.raises(disk_cache.CacheFormatError, match="another one"):
        disk_cache.decode(bytearray(data), "other", types)
    with pytest.raises(TypeError, match="Path cannot be cached"):
        disk_cache.encode([tmp_path], "name", types)
    with pytest.raises(TypeError, match="dtype object and 1 dimensions cannot be cached"):
        disk_cache.encode(np.array([None]), "name", types)
    tails.splits[0] = ResidualSplit(np.array([True]), [(1, np.array([0]), top, np.array([0]))])
    with pytest.raises(TypeError, match="a cycle"):
        disk_cache.encode(top, "name", types)

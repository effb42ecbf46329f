"""The disk cache of compiled grammars: data, not code; checked; private; bounded.

An entry is one file, ``<name>.cmc``, written atomically::

    b"CMCACHE1" | sha256 of the rest (32 bytes) | header length (8 bytes, little-endian) | header | arrays

The header is UTF-8 JSON: the entry's name, the versions it was made by, the number of its numpy
arrays and the object tree that refers to them; the arrays follow, after a table of their dtypes,
offsets and shapes (int64). The tree holds only JSON
scalars, tagged lists (list, tuple, frozenset, dict, bytes, array) and instances of the
dataclasses the caller names, built by calling their constructors with the saved fields. Nothing
in a file decides what code runs: no pickle, arrays read with numeric dtypes only
(``allow_pickle=False`` semantics), and a file that does not hash to its digest, names another
entry, was made by other versions or does not decode is ignored, so the caller rebuilds it and
overwrites it.

The folder is created with mode 0700 (and narrowed to it where it is ours); files owned by another
user, links and other non-regular files are never read. The total size is capped (`DEFAULT_MAX_MB`,
``CODEMASK_CACHE_MAX_MB`` or the caller's limit): after each write the least recently used entries
(by modification time, which a read refreshes) are removed until the folder fits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from codemask.engine.collection import collection_paused

MAGIC = b"CMCACHE1"
DIGEST_BYTES = 32
FORMAT = 1
SUFFIX = ".cmc"
# Files of earlier versions (pickles) and temporaries of interrupted writes: never read, removed
# by eviction (temporaries once they are an hour old) and by `clear`.
LEGACY_SUFFIXES = (".pkl",)
TEMPORARY_SUFFIX = ".tmp"
STALE_TEMPORARY_S = 3600.0
DEFAULT_MAX_MB = 512.0
MAX_MB_ENV = "CODEMASK_CACHE_MAX_MB"
ALIGN = 64
# The dtypes an entry's arrays may have, by their code in the array table: numbers and booleans,
# never objects.
DTYPE_LIST = [np.dtype(name) for name in (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64")]
DTYPE_CODES = {dtype.str: code for code, dtype in enumerate(DTYPE_LIST)}
MAX_NDIM = 4
# The array table: per array its dtype code, offset, number of dimensions and MAX_NDIM sizes (int64).
TABLE_COLUMNS = 3 + MAX_NDIM

T = TypeVar("T")


class CacheFormatError(ValueError):
    """A cache file that is not a well-formed entry (the caller ignores it and rebuilds)."""


def cache_limit_bytes(max_mb: float | None = None) -> int:
    """The cache's size cap in bytes: ``max_mb``, else ``$CODEMASK_CACHE_MAX_MB``, else `DEFAULT_MAX_MB`."""
    source = "max_cache_mb"
    if max_mb is None:
        configured = os.environ.get(MAX_MB_ENV)
        if configured is None or not configured.strip():
            return int(DEFAULT_MAX_MB * 1e6)
        source = MAX_MB_ENV
        try:
            max_mb = float(configured)
        except ValueError:
            raise ValueError(f"{MAX_MB_ENV} must be a number of megabytes, got {configured!r}") from None
    if isinstance(max_mb, bool) or not isinstance(max_mb, int | float):
        raise TypeError(f"{source} must be a number of megabytes, got {type(max_mb).__name__}")
    if not max_mb >= 0 or max_mb == float("inf"):
        raise ValueError(f"{source} must be a finite number of megabytes >= 0, got {max_mb!r}")
    return int(max_mb * 1e6)


@dataclass(frozen=True)
class CacheEntry:
    """A file in the cache folder: its path, size and last use (modification time)."""

    path: Path
    size: int
    used: float
    stale: bool  # a file of an older version or an interrupted write, never read


class DiskCache:
    """One cache folder with a size cap. Reads and writes never raise for the folder's state: a
    cache that cannot be read or written is a cache that misses."""

    def __init__(self, folder: str | Path, max_bytes: int) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes

    def path(self, name: str) -> Path:
        return self.folder / f"{name}{SUFFIX}"

    # -- reading -------------------------------------------------------------------------------

    def read(self, name: str, root: type[T], types: Sequence[type]) -> T | None:
        """The entry's object if it is a sound entry of this name and versions holding a ``root``,
        else None; a hit counts as a use for eviction."""
        path = self.path(name)
        data = _read_own_file(path)
        if data is None:
            return None
        try:
            found = decode(data, name, types)
        except (CacheFormatError, ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError):
            return None
        if not isinstance(found, root):
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        return found

    # -- writing -------------------------------------------------------------------------------

    def writable(self) -> bool:
        """Whether the folder is ours and takes files (made with mode 0700 if missing)."""
        return self._prepare_folder()

    def write(self, name: str, value: object, types: Sequence[type]) -> Path | None:
        """Write an entry atomically (a reader never sees half a file), then evict the least
        recently used entries beyond the cap. Returns the file, or None where it was not written:
        a folder that is not ours or not writable, or an entry larger than the whole cap."""
        data = encode(value, name, types)
        if len(data) > self.max_bytes or not self._prepare_folder():
            return None
        path = self.path(name)
        temporary: str | None = None
        try:
            with tempfile.NamedTemporaryFile(dir=self.folder, delete=False, suffix=TEMPORARY_SUFFIX) as f:
                temporary = f.name
                f.write(data)
            os.replace(temporary, path)
        except OSError:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            return None
        self.evict(keep=path)
        return path

    def _prepare_folder(self) -> bool:
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            info = os.stat(self.folder)
            if _owner_mismatch(info):
                return False
            if stat.S_IMODE(info.st_mode) & 0o077:
                os.chmod(self.folder, 0o700)
            return os.access(self.folder, os.W_OK | os.X_OK)
        except OSError:
            return False

    # -- the folder as a whole ----------------------------------------------------------------

    def entries(self) -> list[CacheEntry]:
        """This user's files in the folder (entries, older versions' files, temporaries), least
        recently used first."""
        found = []
        for path, info in _own_files(self.folder):
            name = path.name
            stale = name.endswith(LEGACY_SUFFIXES) or name.endswith(TEMPORARY_SUFFIX)
            if name.endswith(SUFFIX) or stale:
                found.append(CacheEntry(path, info.st_size, info.st_mtime, stale))
        return sorted(found, key=lambda entry: entry.used)

    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.entries())

    def evict(self, keep: Path | None = None) -> int:
        """Remove files of older versions, temporaries an hour old, then the least recently used
        entries until the folder fits the cap (``keep`` last of all); returns how many went."""
        entries = self.entries()
        now = time.time()
        doomed = [e for e in entries if e.stale and (not e.path.name.endswith(TEMPORARY_SUFFIX)
                                                     or now - e.used > STALE_TEMPORARY_S)]
        total = sum(e.size for e in entries) - sum(e.size for e in doomed)
        for entry in sorted((e for e in entries if not e.stale), key=lambda e: (e.path == keep, e.used)):
            if total <= self.max_bytes:
                break
            doomed.append(entry)
            total -= entry.size
        return sum(_remove(entry.path) for entry in doomed)

    def clear(self) -> tuple[int, int]:
        """Remove every file of this user in the folder that the cache made; returns (files, bytes)."""
        removed = freed = 0
        for entry in self.entries():
            if _remove(entry.path):
                removed += 1
                freed += entry.size
        return removed, freed

    def remove(self, pattern: str, keep: Path | None = None) -> int:
        """Remove this user's entries whose name matches the glob ``pattern`` (without the
        suffix), except ``keep``; returns how many went."""
        return sum(_remove(path) for path, _info in _own_files(self.folder, f"{pattern}{SUFFIX}") if path != keep)


def _owner_mismatch(info: os.stat_result) -> bool:
    getuid = getattr(os, "getuid", None)
    return getuid is not None and info.st_uid != getuid()


def _own_files(folder: Path, pattern: str = "*") -> Iterator[tuple[Path, os.stat_result]]:
    """Regular files (not links) of this user in the folder."""
    with contextlib.suppress(OSError):
        for path in folder.glob(pattern):
            with contextlib.suppress(OSError):
                info = path.lstat()
                if stat.S_ISREG(info.st_mode) and not _owner_mismatch(info):
                    yield path, info


def _remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False


def _read_own_file(path: Path) -> bytearray | None:
    """The bytes of a regular file of this user (never through a link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or _owner_mismatch(info):
            return None
        data = bytearray(info.st_size)
        with os.fdopen(os.dup(fd), "rb") as f:
            if f.readinto(data) != info.st_size:
                return None
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


# -- the format ----------------------------------------------------------------------------

@functools.cache
def versions() -> dict[str, str]:
    """What an entry must have been made by to be read: this format, codemask and numpy."""
    try:
        version = importlib.metadata.version("codemask")
    except importlib.metadata.PackageNotFoundError:  # (run from a source tree)
        version = "unknown"
    return {"format": str(FORMAT), "codemask": version, "numpy": np.__version__}


def encode(value: object, name: str, types: Sequence[type]) -> bytes:
    """An entry's bytes: ``value`` made of JSON scalars, lists, tuples, (frozen)sets, dicts, bytes,
    numpy arrays and instances of ``types`` (dataclasses); anything else is a `TypeError`."""
    with collection_paused():
        return _encode(value, name, types)


def _encode(value: object, name: str, types: Sequence[type]) -> bytes:
    encoder = _Encoder(types)
    objects = [encoder.fields(obj) for obj in encoder.post_order(value)]
    root = encoder.value(value)
    arrays = encoder.arrays
    rows = []
    offset = _aligned(len(arrays) * TABLE_COLUMNS * 8)
    for array in arrays:
        rows.append([DTYPE_CODES[array.dtype.str], offset, array.ndim, *array.shape,
                     *[0] * (MAX_NDIM - array.ndim)])
        offset += _aligned(array.nbytes)
    table = np.array(rows, dtype=np.int64).reshape(len(arrays), TABLE_COLUMNS)
    header = json.dumps({"name": name, "versions": versions(), "arrays": len(arrays), "objects": objects,
                         "root": root}, separators=(",", ":")).encode()
    start = _aligned(len(MAGIC) + DIGEST_BYTES + 8 + len(header)) - len(MAGIC) - DIGEST_BYTES
    body = bytearray(start + offset)
    body[:8] = len(header).to_bytes(8, "little")
    body[8:8 + len(header)] = header
    body[start:start + table.nbytes] = table.tobytes()
    for row, array in zip(table.tolist(), arrays, strict=True):
        body[start + row[1]:start + row[1] + array.nbytes] = np.ascontiguousarray(array).tobytes()
    return MAGIC + hashlib.sha256(body).digest() + bytes(body)


def decode(data: bytearray, name: str, types: Sequence[type]) -> object:
    """The value of an entry's bytes (`encode`), after checking its digest, name and versions."""
    with collection_paused():
        return _decode(data, name, types)


def _decode(data: bytearray, name: str, types: Sequence[type]) -> object:
    head = len(MAGIC) + DIGEST_BYTES
    if len(data) < head + 8 or data[:len(MAGIC)] != MAGIC:
        raise CacheFormatError("not a codemask cache entry")
    body = memoryview(data)[head:]
    if hashlib.sha256(body).digest() != bytes(data[len(MAGIC):head]):
        raise CacheFormatError("the entry does not match its digest")
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        raise CacheFormatError("the header runs past the end of the entry")
    header = json.loads(bytes(body[8:8 + size]).decode())
    if not isinstance(header, dict) or header.get("name") != name or header.get("versions") != versions():
        raise CacheFormatError("the entry is another one, or made by other versions")
    arrays = _arrays(data, _aligned(head + 8 + size), header["arrays"])
    return _Decoder(types, arrays).run(header["objects"], header["root"])


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _arrays(data: bytearray, start: int, count: object) -> list[np.ndarray]:
    """The entry's arrays (views of ``data``), after checking the table that describes them."""
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= (len(data) - start) // 8:
        raise CacheFormatError("a malformed array count")
    table = np.frombuffer(data, dtype=np.int64, count=count * TABLE_COLUMNS, offset=start).reshape(count, -1)
    codes, offsets, ndims, shapes = table[:, 0], table[:, 1], table[:, 2], table[:, 3:]
    if count and not ((codes >= 0).all() and (codes < len(DTYPE_LIST)).all() and (ndims >= 0).all()
                      and (ndims <= MAX_NDIM).all() and (shapes >= 0).all() and (offsets >= 0).all()
                      and (shapes < 2**40).all()):
        raise CacheFormatError("a malformed array table")
    itemsizes = np.array([dtype.itemsize for dtype in DTYPE_LIST], dtype=np.int64)[codes]
    shapes = np.where(np.arange(MAX_NDIM) < ndims[:, None], shapes, 1)
    counts = shapes.prod(axis=1)
    if count and (start + offsets + counts * itemsizes > len(data)).any():
        raise CacheFormatError("an array runs past the end of the entry")
    return [np.frombuffer(data, dtype=DTYPE_LIST[code], count=n, offset=start + offset).reshape(shape[:ndim])
            for code, offset, ndim, n, shape in zip(codes.tolist(), offsets.tolist(), ndims.tolist(),
                                                     counts.tolist(), shapes.tolist(), strict=True)]


class _Encoder:
    def __init__(self, types: Sequence[type]) -> None:
        self.types = {cls: cls.__qualname__ for cls in types}
        self.arrays: list[np.ndarray] = []
        self._array_index: dict[int, int] = {}
        self._object_index: dict[int, int] = {}

    def post_order(self, root: object) -> list[object]:
        """The dataclass instances under ``root``, each after every instance it holds (shared ones
        once); a cycle is a `TypeError`."""
        order: list[object] = []
        on_path: set[int] = set()
        done: set[int] = set()
        stack: list[tuple[object, bool]] = [(child, False) for child in reversed(self._held(root))]
        while stack:
            obj, finished = stack.pop()
            if finished:
                on_path.discard(id(obj))
                done.add(id(obj))
                self._object_index[id(obj)] = len(order)
                order.append(obj)
                continue
            if id(obj) in done:
                continue
            if id(obj) in on_path:
                raise TypeError(f"a cycle through a {type(obj).__name__} cannot be cached")
            on_path.add(id(obj))
            stack.append((obj, True))
            fields = [getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init]  # type: ignore[arg-type]
            stack.extend((child, False) for child in reversed(self._held(fields)))
        return order

    def _held(self, value: object) -> list[object]:
        """The instances of the named types inside ``value``'s containers (not inside those instances)."""
        found, todo = [], [value]
        while todo:
            item = todo.pop()
            if type(item) in self.types:
                found.append(item)
            elif isinstance(item, list | tuple | set | frozenset):
                todo.extend(reversed(list(item)))
            elif isinstance(item, dict):
                todo.extend(reversed([part for pair in item.items() for part in pair]))
        return found

    def fields(self, obj: object) -> list[object]:
        fields = {f.name: self.value(getattr(obj, f.name)) for f in dataclasses.fields(obj)  # type: ignore[arg-type]
                  if f.init}
        return [self.types[type(obj)], fields]

    def value(self, value: object) -> object:
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, int | float):
            return value
        if isinstance(value, np.bool_ | np.integer | np.floating):
            return value.item()
        if type(value) in self.types:
            return ["O", self._object_index[id(value)]]
        if isinstance(value, np.ndarray):
            return ["A", self._array(value)]
        if isinstance(value, bytes):
            return ["B", self._array(np.frombuffer(value, dtype=np.uint8))]
        if isinstance(value, list | tuple):
            tag = "L" if isinstance(value, list) else "T"
            if all(type(item) is int or type(item) is str for item in value):  # (most: lexer keys)
                return [tag, *value]
            return [tag, *(self.value(item) for item in value)]
        if isinstance(value, frozenset | set):
            return ["F" if isinstance(value, frozenset) else "S", *(self.value(item) for item in value)]
        if isinstance(value, dict):
            return ["D", *(self.value(part) for pair in value.items() for part in pair)]
        raise TypeError(f"a {type(value).__name__} cannot be cached")

    def _array(self, array: np.ndarray) -> int:
        found = self._array_index.get(id(array))
        if found is None:
            if array.dtype.str not in DTYPE_CODES or array.ndim > MAX_NDIM:
                raise TypeError(f"arrays of dtype {array.dtype} and {array.ndim} dimensions cannot be cached")
            found = self._array_index[id(array)] = len(self.arrays)
            self.arrays.append(array)
        return found


class _Decoder:
    def __init__(self, types: Sequence[type], arrays: list[np.ndarray]) -> None:
        self.types = {cls.__qualname__: cls for cls in types}
        self.arrays = arrays
        self.objects: list[object] = []

    def run(self, objects: object, root: object) -> object:
        if not isinstance(objects, list):
            raise CacheFormatError("malformed object table")
        for item in objects:
            self.objects.append(self._object(item))
        return self.value(root)

    def _object(self, item: object) -> object:
        if not (isinstance(item, list) and len(item) == 2 and item[0] in self.types and isinstance(item[1], dict)):
            raise CacheFormatError(f"a malformed object: {item!r:.80}")
        cls = self.types[item[0]]
        wanted = {f.name for f in dataclasses.fields(cls) if f.init}
        if set(item[1]) - wanted:
            raise CacheFormatError(f"unknown fields of {cls.__name__}: {sorted(set(item[1]) - wanted)}")
        return cls(**{key: self.value(value) for key, value in item[1].items()})

    def value(self, value: object) -> object:
        if not isinstance(value, list):
            if value is None or isinstance(value, bool | int | float | str):
                return value
            raise CacheFormatError(f"a malformed value: {value!r:.80}")
        if not value or not isinstance(value[0], str):
            raise CacheFormatError("an untagged list")
        tag, items = value[0], value[1:]
        if tag in ("A", "B", "O"):
            if len(items) != 1 or not isinstance(items[0], int) or isinstance(items[0], bool):
                raise CacheFormatError(f"a malformed reference: {value!r:.80}")
            index = items[0]
            pool = self.objects if tag == "O" else self.arrays
            if not 0 <= index < len(pool):  # (objects only refer to earlier ones: no cycles)
                raise CacheFormatError(f"a reference out of range: {value!r:.80}")
            found = pool[index]
            if tag == "B":
                assert isinstance(found, np.ndarray)
                return found.tobytes() if found.dtype == np.uint8 and found.ndim == 1 else _bad(value)
            return found
        if all(type(item) is not list and type(item) is not dict for item in items):
            decoded = items  # (scalars: most lists and tuples)
        else:
            decoded = [self.value(item) for item in items]
        if tag == "L":
            return decoded
        if tag == "T":
            return tuple(decoded)
        if tag == "F":
            return frozenset(decoded)
        if tag == "S":
            return set(decoded)
        if tag == "D" and len(decoded) % 2 == 0:
            return dict(zip(decoded[::2], decoded[1::2], strict=True))
        raise CacheFormatError(f"an unknown tag: {value!r:.80}")


def _bad(value: object) -> bytes:
    raise CacheFormatError(f"a malformed byte string: {value!r:.80}")

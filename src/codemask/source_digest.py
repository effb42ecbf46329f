"""A digest of some of codemask's own files, for caches whose entries depend on the code that made them."""

from __future__ import annotations

import hashlib
from pathlib import Path


def files_digest(folder: Path, patterns: tuple[str, ...]) -> str:
    """The SHA-256 (hex) of the files under ``folder`` that match any of the glob ``patterns``, each
    as its path relative to ``folder`` (with ``/``, on every system) and its bytes, in path order:
    it changes whenever one of them does, whether or not a version number was bumped."""
    digest = hashlib.sha256()
    for path in sorted({path for pattern in patterns for path in folder.glob(pattern)}):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()

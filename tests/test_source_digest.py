"""files_digest: a digest of the files a cache entry depends on, against hashlib written out."""

from __future__ import annotations

import hashlib
from pathlib import Path

from codemask.source_digest import files_digest


def test_the_digest_follows_the_files_their_paths_and_the_patterns(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not code\n")
    expected = hashlib.sha256(b"a.py\0x = 1\n" + b"sub/b.py\0y = 2\n").hexdigest()
    assert files_digest(tmp_path, ("**/*.py",)) == expected
    assert files_digest(tmp_path, ("**/*.py", "*.py")) == expected  # (a file matched twice counts once)
    assert files_digest(tmp_path, ("*.py",)) == hashlib.sha256(b"a.py\0x = 1\n").hexdigest()
    before = files_digest(tmp_path, ("**/*.py",))
    (tmp_path / "notes.txt").write_text("changed\n")
    assert files_digest(tmp_path, ("**/*.py",)) == before  # (a file no pattern matches)
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert files_digest(tmp_path, ("**/*.py",)) != before
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "sub" / "b.py").rename(tmp_path / "b.py")  # (same bytes, another place)
    assert files_digest(tmp_path, ("**/*.py",)) != before

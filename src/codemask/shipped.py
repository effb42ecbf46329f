"""The data folders codemask ships: ``grammars/`` and ``monitors/`` at the top of the repository.

Each exists once in the source tree, as a top-level folder beside ``src/``. A wheel carries it inside
the package as ``codemask/<folder>/`` (``setup.py`` copies it there at build time); an editable install
or a source checkout reads the top-level folder directly, so there is no build step between editing a
grammar or a monitor definition and using it.
"""

from __future__ import annotations

from pathlib import Path

FOLDERS = ("grammars", "monitors")


def data_dirs(folder: str) -> list[Path]:
    """Where the shipped ``folder`` is looked for: inside the installed package, then in the checkout."""
    if folder not in FOLDERS:
        raise ValueError(f"no shipped data folder {folder!r} (known: {', '.join(FOLDERS)})")
    package = Path(__file__).resolve().parent
    checkout = package.parents[1]  # src/codemask -> the repository root, in a source checkout
    candidates = [package / folder]
    if (checkout / "pyproject.toml").is_file():
        candidates.append(checkout / folder)
    return [path for path in candidates if path.is_dir()]

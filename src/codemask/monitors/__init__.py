"""Monitor-guided decoding: a language server's static analysis as token masks.

``for_workspace(workspace, file)`` gives the default monitors for a file being generated into —
member access after ``.`` (enum members, ``case`` patterns), keyword names and arity in calls,
names after ``from m import`` / in ``import { }``, constructors after ``new`` — all backed by
one language-server process per workspace; pass them as ``constrained_generate(..., monitors=...)``
or to :func:`codemask.hf.monitor_logits_processor`. What is exact and how to add a language:
``docs/guides/monitors.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from codemask.monitors.lsp import LanguageServer, ServerUnavailable, server_for, shutdown_all, workspace_folder
from codemask.monitors.masks import NameMasks
from codemask.monitors.monitor import (
    Answer,
    CallArgumentMonitor,
    ConstructorMonitor,
    ImportNameMonitor,
    MemberAccessMonitor,
    Monitor,
    WorkspaceFile,
    completion_names,
    keyword_names,
)
from codemask.monitors.spec import LanguageSpec, ServerSpec, language_spec, languages
from codemask.monitors.stage import MonitorSet, MonitorStage, MonitorStats

__all__ = [
    "Answer",
    "CallArgumentMonitor",
    "ConstructorMonitor",
    "ImportNameMonitor",
    "LanguageServer",
    "LanguageSpec",
    "MemberAccessMonitor",
    "Monitor",
    "MonitorSet",
    "MonitorStage",
    "MonitorStats",
    "NameMasks",
    "ServerSpec",
    "ServerUnavailable",
    "WorkspaceFile",
    "completion_names",
    "for_workspace",
    "keyword_names",
    "language_spec",
    "languages",
    "server_for",
    "shutdown_all",
]


def for_workspace(workspace_dir: str | os.PathLike[str], file_path: str | os.PathLike[str],
                  language: str = "python", *, server: str | None = None, prefix: str | None = None,
                  suffix: str = "", timeout_s: float | None = None, wait: bool = True) -> list[Monitor]:
    """The default monitors for ``file_path`` (relative to ``workspace_dir`` or absolute): one per
    trigger the language defines (member access, call arguments, imported names, ``new``).

    The workspace's server (``server``: a name from ``monitors/<language>.toml``, default the
    language's default) is started once per process and shared. ``prefix`` is the file's text
    before the generated part (None: the prompt is that text); ``suffix`` the text after it.
    ``timeout_s`` bounds each request (default: the server's ``request_timeout_s``). With ``wait``
    this returns once the server is ready (or its start-up timeout passed: monitors then stay silent
    until it is); without, it returns at once and early steps go unconstrained. A server that is
    not installed raises :class:`ServerUnavailable` with its install hint, a workspace folder that does
    not exist :class:`~codemask.errors.WorkspaceError`.
    """
    spec = language_spec(language)
    workspace = workspace_folder(workspace_dir)
    path = Path(file_path)
    path = path if path.is_absolute() else workspace / path
    server_spec = spec.server(server)
    if not server_spec.available():
        raise ServerUnavailable(f"{server_spec.command[0]} not found; install it: {server_spec.install}")
    process = server_for(server_spec, workspace)
    if wait:
        process.wait_ready()
    file = WorkspaceFile(spec, process, path, prefix, suffix, timeout_s)
    kinds: dict[str, Callable[[WorkspaceFile], Monitor]] = {
        "member": MemberAccessMonitor, "call": CallArgumentMonitor, "import": ImportNameMonitor,
        "constructor": ConstructorMonitor}
    return [monitor(file) for trigger, monitor in kinds.items() if trigger in spec.triggers]

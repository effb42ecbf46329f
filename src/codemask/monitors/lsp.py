"""A thin language-server client: JSON-RPC 2.0 over a server's stdin/stdout, on stdlib threads.

Why not multilspy: it pins ``jedi-language-server==0.41.3``, reports completions by ``label`` (not the
text a completion inserts), runs an asyncio loop per server, and fails on TypeScript's
``workspace/configuration`` requests; the monitors need one blocking call with a hard deadline per
decoding step, from whatever thread the decoding stage runs in. Why not pygls: its client side is
asyncio too and adds nothing the monitors use. This client is a reader thread that resolves one
:class:`concurrent.futures.Future` per request id; everything else (documents, restarts) lives in
:class:`LanguageServer`.

Guarantees the decoding loop relies on: a request never blocks longer than its timeout; a server
that dies fails every pending request at once (the reader sees end-of-file); a server that stalls
answers nothing until it catches up, and requests made meanwhile fail immediately instead of each
waiting out its own timeout.

Every server process is signalled and reaped on every path: a start that fails or times out
(a server that never answers ``initialize``), a crash (the reader reaps it at end-of-file), a
`LanguageServer.close` while it is still starting, and the interpreter's exit (an `atexit` hook
ends every process still running). A server runs in a process group of its own, so helpers it
spawned (tsserver under typescript-language-server) are signalled with it: ``SIGTERM``, then
``SIGKILL`` after `TERMINATE_GRACE_S`. The reader thread is never waited on while it may hold a
pipe: the process is signalled first, its pipes closed only once the reader has finished.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemask.errors import CodemaskError, WorkspaceError
from codemask.monitors.spec import ServerSpec
from codemask.monitors.text import minimal_edit, position_of


class ServerUnavailable(CodemaskError, RuntimeError):
    """The server is not installed, not running, not ready, crashed, or did not answer in time."""


# How long a server has to exit after SIGTERM before it (and its process group) gets SIGKILL.
TERMINATE_GRACE_S = 2.0
_POSIX = sys.platform != "win32"


_AHEAD_LIMIT = 16  # requests sent ahead and not taken yet, per server


@dataclass(frozen=True)
class _RequestKey:
    """What makes two requests the same: method, document text, cursor and extra parameters."""

    method: str
    uri: str
    text: str
    cursor: int
    extra: str


@dataclass
class _Sent:
    """A request on its way: the connection it went out on, its id, its answer, when it was sent
    and when the answer came (perf_counter seconds)."""

    connection: JsonRpcConnection
    request_id: int
    future: Future[Any]
    started: float
    answered_at: float | None = None

    def __post_init__(self) -> None:
        self.future.add_done_callback(self._stamp)

    def _stamp(self, _: Future[Any]) -> None:
        self.answered_at = time.perf_counter()

    @property
    def latency_s(self) -> float:
        """The round-trip: until the answer came, not until someone took it."""
        return (self.answered_at or time.perf_counter()) - self.started


def _frozen(extra: dict[str, Any] | None) -> str:
    return json.dumps(extra, sort_keys=True) if extra else ""


class JsonRpcConnection:
    """Framed JSON-RPC over a subprocess's pipes; one reader thread, one future per request."""

    def __init__(self, process: subprocess.Popen[bytes], on_request: Callable[[str, Any], Any],
                 on_notification: Callable[[str, Any], None],
                 on_close: Callable[[JsonRpcConnection], None]) -> None:
        self.process = process
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_close = on_close
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self.ended = False  # the output ended (set before `on_close` is called)
        self.input_broken = False  # a write failed: the server closed its input (it is exiting)
        self._reader = threading.Thread(target=self._read_loop, name="codemask-lsp-reader", daemon=True)
        self._reader.start()
        threading.Thread(target=self._drain_stderr, name="codemask-lsp-stderr", daemon=True).start()
        if _POSIX:
            threading.Thread(target=self._watch_exit, name="codemask-lsp-exit", daemon=True).start()

    def request(self, method: str, params: Any) -> tuple[int, Future[Any]]:
        """Send a request; its answer (or failure) arrives in the returned future."""
        future: Future[Any] = Future()
        request_id = next(self._ids)
        with self._lock:
            self._pending[request_id] = future
        if not self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}):
            self._fail(request_id, ServerUnavailable("the server's input is closed"))
        return request_id, future

    def notify(self, method: str, params: Any) -> bool:
        """Send a notification; False when the server can no longer be written to."""
        return self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def forget(self, request_id: int) -> None:
        """Stop waiting for ``request_id`` (after a timeout) and ask the server to cancel it."""
        with self._lock:
            self._pending.pop(request_id, None)
        self.notify("$/cancelRequest", {"id": request_id})

    @property
    def outstanding(self) -> int:
        with self._lock:
            return len(self._pending)

    def _send(self, message: dict[str, Any]) -> bool:
        body = json.dumps(message, ensure_ascii=False).encode("utf-8")
        stdin = self.process.stdin
        if stdin is None or self.closed.is_set():
            return False
        try:
            with self._lock:
                stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.input_broken = True
            return False
        return True

    def _fail(self, request_id: int, error: Exception) -> None:
        with self._lock:
            future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def _read_loop(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                message = _read_message(stdout)
                if message is None:
                    break
                self._dispatch(message)
        finally:
            # Before marking the connection closed and failing its requests: whoever sees either
            # sees the restart begun.
            self.ended = True
            self._on_close(self)
            self.closed.set()
            with self._lock:
                pending, self._pending = self._pending, {}
            for future in pending.values():
                if not future.done():
                    future.set_exception(ServerUnavailable("the server exited"))
            # The server closed its output: it crashed, exits, or was ended. Reap it (signalling
            # it first should it still run), so that no process is left behind, not even a zombie.
            _terminate(self.process)
            with contextlib.suppress(OSError, ValueError):
                stdout.close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" not in message:  # a response
            with self._lock:
                future = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
            if future is None or future.done():
                return  # answered after we stopped waiting
            if "error" in message:
                future.set_exception(ServerUnavailable(f"server error: {message['error']}"))
            else:
                future.set_result(message.get("result"))
        elif "id" in message:  # a request from the server: answer it, or it may wait for us forever
            result = self._on_request(message["method"], message.get("params"))
            self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        else:
            self._on_notification(message["method"], message.get("params"))

    def _watch_exit(self) -> None:
        """When the server process exits, end its process group: helpers it spawned may hold its
        output open, and the reader would never see the end-of-file that reaps it and restarts
        it. (Waits without reaping, so the group's id stays reserved until the reader reaps.)"""
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOWAIT)
            _signal(self.process, signal.SIGKILL)

    def _drain_stderr(self) -> None:
        """Keep reading the server's log so that a chatty server never blocks on a full pipe."""
        stderr = self.process.stderr
        if stderr is None:
            return
        with contextlib.suppress(OSError, ValueError):
            while stderr.read(65536):
                pass
            stderr.close()


def _read_message(stream: Any) -> dict[str, Any] | None:
    """One framed message, or None at end of file."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length is None:
        return {}
    body = stream.read(length)
    if len(body) < length:
        return None
    try:
        message = json.loads(body)
    except json.JSONDecodeError:
        return {}
    return message if isinstance(message, dict) else {}


class LanguageServer:
    """One server process on one workspace, restarted after a crash, with its open documents.

    Start-up runs in a background thread; :meth:`wait_ready` blocks until the server answered
    ``initialize`` and a first probe request (and finished any work-done progress it announced).
    Until then, and while a restart is under way, requests raise :class:`ServerUnavailable` at
    once. Documents are kept in sync with incremental ``didChange`` edits and re-opened after a
    restart.
    """

    def __init__(self, spec: ServerSpec, workspace: Path) -> None:
        self.spec = spec
        self.workspace = workspace_folder(workspace)
        self.ready = threading.Event()
        self._settled = threading.Event()  # the last start finished, ready or failed
        self.start_error: str | None = None
        self.restarts = 0
        self.answered = 0  # requests answered in time; the last 4096 round-trips are in latencies_s
        self.latencies_s: deque[float] = deque(maxlen=4096)
        self.answered_ahead = 0  # of those, requests sent ahead (:meth:`send_ahead`)
        self._ahead: OrderedDict[_RequestKey, _Sent] = OrderedDict()
        self._connection: JsonRpcConnection | None = None
        self._documents: dict[str, tuple[str, int]] = {}  # uri -> (text the server has, version)
        self._lock = threading.RLock()
        # One document edit + request at a time (monitors of several generations may share the server);
        # the reader thread never takes it, so a server dying mid-request cannot deadlock it.
        self.request_lock = threading.RLock()
        self._progress: set[Any] = set()
        self._progress_seen = threading.Event()
        self._stalled: tuple[float, Future[Any]] | None = None  # (when, a ping after a timeout)
        self._closed = False
        self._launching: subprocess.Popen[bytes] | None = None  # a process between spawn and `initialize`
        self._starting = False  # a start is under way (its thread has not finished)
        self._restart_wanted = False  # the server a start made died before that start finished
        self._restart_times: list[float] = []

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server in the background (idempotent while it runs or starts)."""
        with self._lock:
            if self._closed or self._starting:
                return
            if self._connection is not None and not self._connection.closed.is_set():
                return
            self.ready.clear()
            self._settled.clear()
            self._starting = True
        threading.Thread(target=self._start, name="codemask-lsp-start", daemon=True).start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the server can answer (False when its start failed or took longer than ``timeout``).

        A server that died a moment ago may not have been noticed yet (its reader begins the
        restart at end-of-file, which can come after a failed write or ``poll()`` tells of the
        death): then wait for that first, so the answer is about the restarted server.
        """
        limit = self.spec.startup_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        connection = self._connection
        if connection is not None and (connection.input_broken or connection.process.poll() is not None):
            connection.closed.wait(limit)
        self._settled.wait(max(0.0, deadline - time.monotonic()))
        return self.ready.is_set()

    @property
    def pid(self) -> int | None:
        connection = self._connection
        return None if connection is None else connection.process.pid

    def _start(self) -> None:
        try:
            self._launch()
        finally:
            with self._lock:
                self._starting = False
                wanted, self._restart_wanted = self._restart_wanted, False
            self._settled.set()
        if wanted:
            self._restart()

    def _launch(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                process = _spawn(self.spec.command, self.workspace, {**os.environ, **self.spec.env})
            except OSError as error:
                self.start_error = f"cannot start {self.spec.command[0]}: {error}. {self.spec.install}"
                return
            self._launching = process  # (`close` ends it, should it come during the start)
        connection = JsonRpcConnection(process, self._answer_server_request, self._on_notification,
                                       self._on_exit)
        try:
            self._initialize(connection)
        except Exception as error:  # (timeouts, an exited server, a malformed answer: the start failed)
            self.start_error = f"{self.spec.name} did not start: {error!r}"
            _terminate(process)
            return
        finally:
            with self._lock:
                self._launching = None
        with self._lock:
            if self._closed:  # closed while it started
                _terminate(process)
                return
            if connection.ended:  # it died as it started: `_on_exit` did not know it yet
                self.ready.clear()
                self._restart_wanted = True
                return
            self._connection = connection
            self._stalled = None
            for uri, (text, version) in list(self._documents.items()):
                self._documents[uri] = (text, version + 1)
                connection.notify("textDocument/didOpen", {"textDocument": {
                    "uri": uri, "languageId": self.spec.language_id, "version": version + 1, "text": text}})
        self.start_error = None
        self.ready.set()

    def _initialize(self, connection: JsonRpcConnection) -> None:
        deadline = time.monotonic() + self.spec.startup_timeout_s
        _, answer = connection.request("initialize", self._initialize_params())
        answer.result(timeout=max(0.0, deadline - time.monotonic()))
        connection.notify("initialized", {})
        if self.spec.settings:
            connection.notify("workspace/didChangeConfiguration", {"settings": self.spec.settings})
        # Servers that index announce it with work-done progress; give them a moment to begin one.
        self._progress_seen.wait(self.spec.progress_grace_s)
        while self._progress and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.spec.warmup:
            self._warm_up(connection, deadline)

    def _warm_up(self, connection: JsonRpcConnection, deadline: float) -> None:
        """Ready means answering: one completion on a scratch document loads what the first real one needs."""
        uri = (self.workspace / f"__codemask_warmup__{self.spec.extension}").as_uri()
        text = self.spec.warmup
        connection.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": self.spec.language_id, "version": 1, "text": text}})
        _, answer = connection.request("textDocument/completion", {
            "textDocument": {"uri": uri}, "position": position_of(text, len(text))})
        try:
            answer.result(timeout=max(0.0, deadline - time.monotonic()))
        except ServerUnavailable:
            if connection.closed.is_set():
                raise
            # an error answer is an answer: the server is up (only silence fails the start)
        finally:
            connection.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def _initialize_params(self) -> dict[str, Any]:
        root = self.workspace.as_uri()
        return {
            "processId": os.getpid(),
            "rootUri": root,
            "rootPath": str(self.workspace),
            "workspaceFolders": [{"uri": root, "name": self.workspace.name}],
            "initializationOptions": self.spec.init_options,
            "capabilities": {
                "general": {"positionEncodings": ["utf-16"]},
                "window": {"workDoneProgress": True},
                "workspace": {"configuration": True, "workspaceFolders": True},
                "textDocument": {
                    "synchronization": {"dynamicRegistration": False},
                    "completion": {"completionItem": {"snippetSupport": True, "insertReplaceSupport": True,
                                                      "labelDetailsSupport": True},
                                   "contextSupport": True},
                    "signatureHelp": {"signatureInformation": {"parameterInformation": {
                        "labelOffsetSupport": True}, "activeParameterSupport": True}},
                },
            },
        }

    def _answer_server_request(self, method: str, params: Any) -> Any:
        """Answers to what servers ask their client (configuration, progress tokens, registrations)."""
        if method == "workspace/configuration":
            items = (params or {}).get("items", [])
            return [self._setting(item.get("section")) for item in items]
        if method == "workspace/workspaceFolders":
            return [{"uri": self.workspace.as_uri(), "name": self.workspace.name}]
        return None

    def _setting(self, section: str | None) -> Any:
        value: Any = self.spec.settings
        for part in (section or "").split("."):
            if not part:
                continue
            value = value.get(part) if isinstance(value, dict) else None
        return value if value is not None else {}

    def _on_notification(self, method: str, params: Any) -> None:
        if method != "$/progress" or not isinstance(params, dict):
            return
        kind = (params.get("value") or {}).get("kind")
        if kind == "begin":
            self._progress.add(params.get("token"))
            self._progress_seen.set()
        elif kind == "end":
            self._progress.discard(params.get("token"))

    def _on_exit(self, connection: JsonRpcConnection) -> None:
        """A server's output ended. If it was the live one (it crashed or was killed), restart it."""
        with self._lock:
            if connection is not self._connection:
                return  # a server that failed to start, or one already replaced (a start sees `ended`)
            self.ready.clear()
            if self._closed:
                return
            if self._starting:  # (its start is finishing: it restarts when done)
                self._restart_wanted = True
                return
        self._restart()

    def _ensure_running(self) -> JsonRpcConnection:
        """The live connection, or :class:`ServerUnavailable` (this step goes unconstrained)."""
        connection = self._connection
        if connection is not None and not connection.closed.is_set() and self.ready.is_set():
            return connection
        raise ServerUnavailable(self.start_error or f"{self.spec.name} is not ready")

    def _restart(self) -> None:
        """Restart in the background, at most ``max_restarts`` times a minute (no crash loops)."""
        with self._lock:
            if self._closed or self._starting:
                return
            now = time.monotonic()
            self._restart_times = [t for t in self._restart_times if now - t < 60.0]
            if len(self._restart_times) >= self.spec.max_restarts:
                return
            self._restart_times.append(now)
            self.restarts += 1
            self._connection = None
        self.start()

    def close(self) -> None:
        """``shutdown`` + ``exit``, then terminate the process if it lingers; a server still
        starting is terminated at once."""
        with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
            launching = self._launching
        if launching is not None:
            _terminate(launching)
        if connection is None:
            return
        if not connection.closed.is_set():
            _, answer = connection.request("shutdown", None)
            with contextlib.suppress(Exception):
                answer.result(timeout=1.0)
            connection.notify("exit", None)
            _wait_exit(connection.process, 0.5)  # (a server exits by itself after `exit`)
        _terminate(connection.process)

    # -- documents and requests --------------------------------------------------------------

    def document(self, uri: str) -> str | None:
        """The text the server has for ``uri`` (None before it was opened)."""
        known = self._documents.get(uri)
        return None if known is None else known[0]

    def sync(self, uri: str, text: str) -> None:
        """Make the server's copy of ``uri`` equal ``text`` (``didOpen`` once, then one minimal edit)."""
        connection = self._ensure_running()
        with self._lock:
            known = self._documents.get(uri)
            if known is None:
                self._documents[uri] = (text, 1)
                connection.notify("textDocument/didOpen", {"textDocument": {
                    "uri": uri, "languageId": self.spec.language_id, "version": 1, "text": text}})
                return
            old, version = known
            edit = minimal_edit(old, text)
            if edit is None:
                return
            self._documents[uri] = (text, version + 1)
            connection.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version + 1},
                                                         "contentChanges": [edit.as_change(old)]})

    def request_at(self, method: str, uri: str, text: str, cursor: int, timeout: float,
                   extra: dict[str, Any] | None = None) -> Any:
        """Sync ``uri`` to ``text`` and send ``method`` at code-point offset ``cursor``; its result.

        A request :meth:`send_ahead` sent with the same arguments is not sent again: its answer is
        taken (sent again only if the server refused it). Raises :class:`ServerUnavailable` when the
        server is down, restarting, still busy with a request that timed out earlier (a stalled
        server), or does not answer within ``timeout``.
        """
        sent = self._ahead.pop(_RequestKey(method, uri, text, cursor, _frozen(extra)), None)
        if sent is not None and sent.future.done() and sent.future.exception() is not None:
            sent = None  # refused (a server may cancel an answer for an older version): ask again
        if sent is None:
            self._check_not_stalled()
            sent = self._send_request(method, uri, text, cursor, extra)
        else:
            self.answered_ahead += 1
        try:
            result = sent.future.result(timeout=timeout)
        except FutureTimeout:
            sent.connection.forget(sent.request_id)
            self._stalled = (time.monotonic(), sent.connection.request("$/codemask/ping", None)[1])
            raise ServerUnavailable(f"{method} took longer than {timeout:.3f} s") from None
        self.latencies_s.append(sent.latency_s)
        self.answered += 1
        return result

    def send_ahead(self, method: str, uri: str, text: str, cursor: int, extra: dict[str, Any] | None = None) -> None:
        """Send the request :meth:`request_at` will make with these arguments now, so that the server
        answers it while the caller does other work (the decoding stage: while the model's forward
        pass runs). Not sent while another text of ``uri`` has a request ahead unanswered: a server
        that reads the next edit before answering could answer for the wrong text. The oldest
        requests ahead are dropped past ``_AHEAD_LIMIT``. Raises :class:`ServerUnavailable` as
        :meth:`request_at` does.
        """
        key = _RequestKey(method, uri, text, cursor, _frozen(extra))
        if key in self._ahead or any(k.uri == uri and k.text != text and not sent.future.done()
                                     for k, sent in self._ahead.items()):
            return
        self._check_not_stalled()
        self._ahead[key] = self._send_request(method, uri, text, cursor, extra)
        while len(self._ahead) > _AHEAD_LIMIT:
            _, dropped = self._ahead.popitem(last=False)
            if not dropped.future.done():
                dropped.connection.forget(dropped.request_id)

    def _send_request(self, method: str, uri: str, text: str, cursor: int, extra: dict[str, Any] | None) -> _Sent:
        self.sync(uri, text)
        params = {"textDocument": {"uri": uri}, "position": position_of(text, cursor), **(extra or {})}
        connection = self._ensure_running()
        started = time.perf_counter()
        request_id, future = connection.request(method, params)
        return _Sent(connection, request_id, future, started)

    def _check_not_stalled(self) -> None:
        """After a timeout, ask nothing more until the server answers a ping (any answer, even an error).

        A stalled server then costs one timeout, not one per step. A server that ignores the ping is
        asked again after ``stall_retry_s``.
        """
        stalled = self._stalled
        if stalled is None:
            return
        since, ping = stalled
        connection = self._connection
        alive = connection is not None and not connection.closed.is_set()
        if alive and not ping.done() and time.monotonic() - since < self.spec.stall_retry_s:
            raise ServerUnavailable(f"{self.spec.name} is still busy with an earlier request")
        self._stalled = None


def workspace_folder(workspace: str | os.PathLike[str]) -> Path:
    """The workspace as an absolute folder; one that does not exist is an error, not a server
    that silently fails to start."""
    folder = Path(workspace).resolve()
    if not folder.is_dir():
        raise WorkspaceError(f"workspace folder {str(workspace)!r} does not exist"
                             if not folder.exists() else f"workspace {str(workspace)!r} is not a folder")
    return folder


# Every server process started and not reaped yet: the interpreter's exit ends them (`shutdown_all`).
_PROCESSES: set[subprocess.Popen[bytes]] = set()
_PROCESSES_LOCK = threading.Lock()


def _spawn(command: tuple[str, ...], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a server in a process group of its own (POSIX), registered until it is reaped."""
    with _PROCESSES_LOCK:
        process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env, start_new_session=_POSIX)
        _PROCESSES.add(process)
    return process


def _terminate(process: subprocess.Popen[bytes], grace_s: float = TERMINATE_GRACE_S) -> None:
    """Signal a server (and its process group) and reap it, then close its pipes.

    The order matters: the reader thread blocks inside ``stdout.readline()`` holding the stream's
    lock, so closing the stream first waited forever on a server that never wrote (one that never
    answered ``initialize``) and the process was never signalled. Signalled first, the process
    exits, the reader reads end-of-file and lets go. Standard input is closed here, the output
    and the log by the threads that read them, once they have read to the end. The group gets
    ``SIGKILL`` before the leader is reaped, while its id cannot have been reused."""
    if _exited(process) is None:
        _signal(process, signal.SIGTERM)
        _wait_exit(process, grace_s)
    _signal(process, signal.SIGKILL)  # (helpers left in its group; the leader itself if it lingers)
    with contextlib.suppress(ChildProcessError):
        process.wait()
    with _PROCESSES_LOCK:
        _PROCESSES.discard(process)
    if process.stdin is not None:  # (a write blocked on a full pipe failed when the process died)
        with contextlib.suppress(OSError, ValueError):
            process.stdin.close()


def _wait_exit(process: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to ``seconds`` for the process to exit (without reaping it); whether it did."""
    deadline = time.monotonic() + seconds
    while _exited(process) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _exited(process: subprocess.Popen[bytes]) -> int | None:
    """The process's exit status once it has exited, without reaping it (its id stays reserved)."""
    if process.returncode is not None:
        return process.returncode
    if not _POSIX:
        return process.poll()
    try:
        found = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped meanwhile by another caller
        return process.poll() if process.returncode is None else process.returncode
    return None if found is None else found.si_status


def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the process's group (POSIX) or to the process, unless it was reaped."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if _POSIX:
            os.killpg(process.pid, signum)
        elif signum == signal.SIGTERM:
            process.terminate()
        else:
            process.kill()


_SERVERS: dict[tuple[str, Path], LanguageServer] = {}
_SERVERS_LOCK = threading.Lock()


def server_for(spec: ServerSpec, workspace: str | os.PathLike[str]) -> LanguageServer:
    """The process-wide server of ``spec`` on ``workspace``: started once, reused by every monitor."""
    key = (spec.name, Path(workspace).resolve())
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or server._closed:
            server = LanguageServer(spec, key[1])
            _SERVERS[key] = server
    server.start()
    return server


@atexit.register
def shutdown_all() -> None:
    """Shut every shared server down, then end every server process still running, whoever
    started it (registered with :mod:`atexit`; also usable by tests)."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.close()
    with _PROCESSES_LOCK:
        left = list(_PROCESSES)
    for process in left:
        _terminate(process)

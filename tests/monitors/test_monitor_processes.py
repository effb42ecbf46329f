"""Every language-server process is signalled and reaped on every path: a server that never
answers ``initialize`` (start-up timeout), a close while it starts, crashes, and the interpreter's
exit. Fake servers ignore SIGTERM and spawn a helper process, so only a SIGKILL of their process
group ends them; the children of this process are counted before and after (zombies included)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from codemask.errors import CodemaskError, WorkspaceError
from codemask.monitors import LanguageServer, ServerSpec, ServerUnavailable, for_workspace

FAKE_SERVER = '''
import json, os, signal, subprocess, sys, time

signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
mode, pids = sys.argv[1], sys.argv[2]
helper = subprocess.Popen([sys.executable, "-c",
                           "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
with open(pids, "a") as f:
    f.write(f"{os.getpid()} {helper.pid}\\n")


def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if not line.strip():
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(sys.stdin.buffer.read(length))


if mode == "silent":  # never reads, never answers
    time.sleep(600)
message = read()
body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"capabilities": {}}}).encode()
sys.stdout.buffer.write(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
sys.stdout.buffer.flush()
read()  # `initialized`
os._exit(3)  # mode "crash": dies right after starting
'''


def fake_spec(tmp_path: Path, mode: str, **options: object) -> tuple[ServerSpec, Path]:
    script, pids = tmp_path / "fake_server.py", tmp_path / f"{mode}.pids"
    script.write_text(FAKE_SERVER)
    spec = ServerSpec(name=f"fake-{mode}", language_id="python", command=(sys.executable, str(script), mode,
                                                                           str(pids)),
                      install="(a test's fake server)", **options)  # type: ignore[arg-type]
    return spec, pids


def children() -> set[int]:
    """This process's child processes, zombies included."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.add(int(entry))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead: its parent's to reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def started_pids(pids: Path, count: int = 1, timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = pids.read_text().splitlines() if pids.exists() else []
        if len(lines) >= count and all(len(line.split()) == 2 for line in lines):
            return [int(pid) for line in lines for pid in line.split()]
        time.sleep(0.02)
    raise AssertionError(f"the fake server did not start {count} time(s)")


def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts processes through /proc")


def test_a_server_that_never_answers_initialize_is_killed_and_reaped(tmp_path: Path) -> None:
    """Guards the `_terminate` deadlock: closing the server's output while the reader thread
    held it blocked forever, so a server that never answered ``initialize`` was never signalled
    and outlived its start-up timeout (and Python)."""
    before = children()
    spec, pids = fake_spec(tmp_path, "silent", startup_timeout_s=0.5)
    server = LanguageServer(spec, tmp_path)
    server.start()
    assert not server.wait_ready(5)
    processes = started_pids(pids)
    assert eventually(lambda: children() == before), children() - before
    assert eventually(lambda: not any(running(pid) for pid in processes), timeout=5), processes
    assert server.start_error is not None and "did not start" in server.start_error
    server.close()


def test_closing_a_server_while_it_starts_ends_it(tmp_path: Path) -> None:
    before = children()
    spec, pids = fake_spec(tmp_path, "silent", startup_timeout_s=60.0)
    server = LanguageServer(spec, tmp_path)
    server.start()
    processes = started_pids(pids)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 10
    assert eventually(lambda: children() == before), children() - before
    assert eventually(lambda: not any(running(pid) for pid in processes), timeout=5), processes
    assert not server.wait_ready(1)


def test_a_crashing_server_is_reaped_each_time(tmp_path: Path) -> None:
    """A server that dies right after starting is restarted (once here) and every dead process
    is reaped at once, not left a zombie until the monitors close."""
    before = children()
    spec, pids = fake_spec(tmp_path, "crash", startup_timeout_s=10.0, max_restarts=1, progress_grace_s=0.0)
    server = LanguageServer(spec, tmp_path)
    server.start()
    processes = started_pids(pids, count=2)
    assert eventually(lambda: children() == before), children() - before
    assert eventually(lambda: not any(running(pid) for pid in processes), timeout=5), processes
    assert server.restarts == 1
    server.close()


def test_no_server_outlives_the_interpreter(tmp_path: Path) -> None:
    """A server made directly (not through `server_for`), still starting when Python exits, is
    ended by the exit hook with its helper."""
    spec, pids = fake_spec(tmp_path, "silent", startup_timeout_s=600.0)
    program = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from codemask.monitors import LanguageServer, ServerSpec
        spec = ServerSpec(name="fake", language_id="python", command={spec.command!r}, install="",
                          startup_timeout_s=600.0)
        LanguageServer(spec, Path({str(tmp_path)!r})).start()
        pids = Path({str(pids)!r})
        while not pids.exists() or len(pids.read_text().split()) < 2:
            time.sleep(0.02)
        sys.exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    processes = started_pids(pids)
    assert eventually(lambda: not any(running(pid) for pid in processes), timeout=5), processes


def test_setup_errors_are_codemask_errors(tmp_path: Path) -> None:
    """A workspace folder that does not exist is an error (the monitors were silently inactive),
    and an unavailable server is a `CodemaskError`."""
    with pytest.raises(WorkspaceError, match=r"workspace folder '.*missing' does not exist"):
        for_workspace(tmp_path / "missing", "main.py")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(WorkspaceError, match="is not a folder"):
        LanguageServer(fake_spec(tmp_path, "silent")[0], tmp_path / "a-file")
    assert issubclass(ServerUnavailable, CodemaskError)
    absent = ServerSpec(name="absent", language_id="python", command=(str(tmp_path / "no-such-server"),),
                        install="pip install it")
    server = LanguageServer(absent, tmp_path)
    server.start()
    assert not server.wait_ready(5)
    with pytest.raises(ServerUnavailable, match=r"cannot start .*no-such-server"):
        server.request_at("textDocument/completion", (tmp_path / "x.py").as_uri(), "x.", 2, 1.0)
    server.close()

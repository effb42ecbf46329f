"""The monitors against real language servers on a real multi-module project."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from codemask.monitors import MonitorStats, ServerUnavailable, for_workspace, language_spec, server_for
from codemask.monitors.monitor import completion_names, keyword_names
from tests.monitors.conftest import require_server


def names_at(monitors: list, text: str, method: str = "textDocument/completion") -> tuple[str, ...]:
    parse = completion_names if method.endswith("completion") else keyword_names
    answer = parse(monitors[0].file.request(method, text))
    assert answer is not None
    return answer.names


def test_server_is_started_once_per_workspace(project: Path, monitors: list) -> None:
    again = for_workspace(project, "main.py")
    assert again[0].file.server is monitors[0].file.server
    assert monitors[0].file.server.pid is not None


def test_members_defined_in_another_module(monitors: list, main_prefix: str) -> None:
    names = names_at(monitors, main_prefix + "inv.")
    assert {"restock_shelf", "total_quantity", "shelves", "capacity"} <= set(names)
    assert "quote_price" not in names


def test_import_names_and_keyword_parameters(monitors: list, main_prefix: str) -> None:
    assert {"quote_price", "VAT_RATE"} <= set(names_at(monitors, "from shop.pricing import "))
    params = names_at(monitors, main_prefix + "inv.restock_shelf(", "textDocument/signatureHelp")
    assert set(params) == {"name", "count", "urgent"}


def test_import_monitor_is_silent_for_an_unknown_module(monitors: list) -> None:
    imports = next(m for m in monitors if type(m).__name__ == "ImportNameMonitor")
    assert imports.masks("from shop.pricing import ", _masks())
    assert imports.masks("from no_such_module import ", _masks()) == []  # pyrefly answers the builtins


def test_a_request_sent_ahead_is_answered_once_and_only_for_its_own_text(monitors: list, main_prefix: str) -> None:
    """``send_ahead`` then ``request`` with the same arguments takes the answer already sent for,
    the same names as asking afresh; a request for another text is sent anew."""
    file = monitors[0].file
    server = file.server
    fresh = completion_names(file.request("textDocument/completion", main_prefix + "inv."))
    before = (server.answered, server.answered_ahead)
    sent = time.perf_counter()
    file.send_ahead("textDocument/completion", main_prefix + "inv.")
    deadline = time.monotonic() + 10.0
    while not all(s.future.done() for s in server._ahead.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the answer waits to be asked for
    ahead = completion_names(file.request("textDocument/completion", main_prefix + "inv."))
    assert (server.answered, server.answered_ahead) == (before[0] + 1, before[1] + 1)
    assert ahead == fresh and ahead is not None and "restock_shelf" in ahead.names
    # the latency recorded is the round-trip, not the time the answer waited
    assert server.latencies_s[-1] < time.perf_counter() - sent - 0.25
    file.send_ahead("textDocument/completion", main_prefix + "inv.")
    other = names_at(monitors, "from shop.pricing import ")
    assert "quote_price" in other and server.answered_ahead == before[1] + 1


@pytest.mark.parametrize("server", ["pyrefly", "jedi", "ty"])
def test_each_python_server_answers_members(project: Path, main_prefix: str, server: str) -> None:
    require_server("python", server)
    monitors = for_workspace(project, "main.py", server=server, timeout_s=10.0)
    assert {"restock_shelf", "total_quantity"} <= set(names_at(monitors, main_prefix + "inv."))


@pytest.mark.parametrize("trigger", ["inv.", "import os\nos.", "import os\nos.path.", "x = 'a'\nx.",
                                     "from shop.pricing import "])
def test_servers_with_complete_lists_answer_a_prefix_with_the_first_lists_subset(
        project: Path, main_prefix: str, trigger: str) -> None:
    """A server whose lists are taken as complete though marked ``isIncomplete`` (ty) answers a typed
    prefix with exactly the names of its first list that start with it: reusing that list while the
    name is typed forbids nothing the server would offer."""
    trusted = [name for name, s in language_spec("python").servers.items() if s.complete_lists]
    assert trusted == ["ty"]  # the servers this test vouches for
    for server in trusted:
        require_server("python", server)
        monitors = for_workspace(project, "main.py", server=server, timeout_s=10.0)
        first = names_at(monitors, main_prefix + trigger)
        assert first
        for typed in sorted({n[:k] for n in first for k in (1, 2) if len(n) >= k})[:12]:
            later = set(names_at(monitors, main_prefix + trigger + typed))
            assert {n for n in later if n.startswith(typed)} == {n for n in first if n.startswith(typed)}, typed


def test_utf16_positions_with_characters_beyond_the_bmp(monitors: list, main_prefix: str) -> None:
    # Each 𝔘 is one code point but two UTF-16 units: a client counting code points would put the
    # cursor three units too early, before the dot, and get no members.
    line = 'label = "𝔘𝔫𝔦😀"; inv.'
    text = main_prefix + line
    assert {"restock_shelf", "total_quantity"} <= set(names_at(monitors, text))
    # incremental edits after the wide characters keep the server's copy exact
    usage = MonitorStats()
    mask = monitors[0].masks(text + "res", _masks())
    assert mask and usage.timeouts == 0
    server = monitors[0].file.server
    assert server.document(monitors[0].file.uri) is not None


def _masks():  # a tiny vocabulary is enough for whether a mask comes back
    from codemask.monitors.masks import NameMasks
    from codemask.vocab import Vocabulary

    tokens = [b"restock_shelf", b"total", b"res", b"tock", b"(", b".", b"x"]
    return NameMasks(Vocabulary.from_token_bytes(tokens), language_spec("python").break_characters)


def test_a_stalled_server_times_out_and_degrades(own_project: Path) -> None:
    monitors = for_workspace(own_project, "main.py", timeout_s=0.3)
    server = monitors[0].file.server
    prefix = (own_project / "main.py").read_text()
    os.kill(server.pid, signal.SIGSTOP)
    try:
        started = time.perf_counter()
        assert monitors[0].masks(prefix + "inv.", _masks()) == []  # the step goes unconstrained
        assert monitors[0].masks(prefix + "inv.re", _masks()) == []  # no second wait: still stalled
        assert time.perf_counter() - started < 1.5
        assert monitors[0].counters.timeouts >= 1
    finally:
        os.kill(server.pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not monitors[0].masks(prefix + "inv.", _masks()):
        time.sleep(0.1)
    assert monitors[0].masks(prefix + "inv.", _masks())  # answers again once it caught up


def test_a_killed_server_is_restarted(own_project: Path) -> None:
    monitors = for_workspace(own_project, "main.py", timeout_s=5.0)
    server = monitors[0].file.server
    prefix = (own_project / "main.py").read_text()
    assert names_at(monitors, prefix + "inv.")
    old_pid = server.pid
    os.kill(old_pid, signal.SIGKILL)
    with pytest.raises(ServerUnavailable):
        for _ in range(50):  # the reader notices the exit within moments
            monitors[0].file.request("textDocument/completion", prefix + "inv.")
            time.sleep(0.05)
    assert server.wait_ready(30)
    assert server.pid != old_pid and server.restarts == 1
    assert {"restock_shelf"} <= set(names_at(monitors, prefix + "inv."))  # the document was re-opened


def test_waiting_right_after_a_death_waits_for_the_restart(own_project: Path) -> None:
    """``wait_ready`` just after the process died is about the restarted server, whether or not
    its reader has seen end-of-file yet (a race: CI once got the dead server's pid back)."""
    monitors = for_workspace(own_project, "main.py", timeout_s=5.0)
    server = monitors[0].file.server
    assert server.wait_ready(30)
    for restart in range(1, 4):
        old_pid = server.pid
        assert old_pid is not None
        process = server._connection.process  # type: ignore[union-attr]
        os.kill(old_pid, signal.SIGKILL)
        while process.poll() is None:
            time.sleep(0.001)
        assert server.wait_ready(30)
        assert server.pid != old_pid and server.restarts == restart


def test_servers_are_shared_and_shut_down(own_project: Path) -> None:
    spec = language_spec("python").server()
    server = server_for(spec, own_project)
    assert server is server_for(spec, own_project)
    assert server.wait_ready(30)
    process_pid = server.pid
    server.close()
    assert process_pid is not None
    with pytest.raises(ProcessLookupError):
        for _ in range(40):
            os.kill(process_pid, 0)
            time.sleep(0.05)


def test_typescript_members_from_another_module(tmp_path: Path) -> None:
    require_server("typescript")
    (tmp_path / "lib.ts").write_text("export class Inventory {\n  capacity = 1;\n"
                                     "  restockShelf(name: string): void {}\n}\n")
    prefix = 'import { Inventory } from "./lib";\nconst label = "😀";\nconst inv = new Inventory();\n'
    monitors = for_workspace(tmp_path, "main.ts", language="typescript")
    assert [type(m).__name__ for m in monitors] == [
        "MemberAccessMonitor", "CallArgumentMonitor", "ImportNameMonitor", "ConstructorMonitor"]
    deadline = time.monotonic() + 30  # tsserver loads the project after didOpen, answering nothing meanwhile
    names: tuple[str, ...] = ()
    while not names and time.monotonic() < deadline:
        names = names_at(monitors, prefix + "inv.")
        time.sleep(0.1)
    assert set(names) == {"capacity", "restockShelf"}  # ".capacity" edits re-insert the dot
    assert set(names_at(monitors, prefix + 'const s = "𝔘"; inv?.')) == {"capacity", "restockShelf"}

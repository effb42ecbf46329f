"""What the serving benchmarks share: a completion server started as a subprocess, and a streaming client.

``serving_latency.py`` and ``serving_throughput.py`` talk to servers the way an editor does, over
HTTP on loopback: each server is its own process (``codemask serve`` or ``transformers serve``) on a
free port, stopped when the benchmark is done with it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from codemask.assets import model_dir

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
SERVER_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running server: its base URL, the model name its requests give, and its process."""

    url: str
    model: str
    process: subprocess.Popen[bytes]
    log: Path


def codemask_command(model: str, port: int, max_batch: int = 8) -> list[str]:
    return [str(VENV_BIN / "codemask"), "serve", "--model", model, "--port", str(port), "--max-batch", str(max_batch)]


def transformers_command(model: str, port: int, continuous_batching: bool) -> list[str]:
    return [str(VENV_BIN / "transformers"), "serve", str(model_dir(model)), "--port", str(port),
            "--host", "127.0.0.1", "--device", "cpu", "--log-level", "warning",
            "--continuous-batching" if continuous_batching else "--no-continuous-batching"]


@contextmanager
def running(command: list[str], port: int, model: str, log: Path, timeout: float = 300.0) -> Iterator[Server]:
    """Start ``command`` (a server on ``port``), wait until ``/health`` answers 200, stop it afterwards.

    A server that exits or does not come up within ``timeout`` is a RuntimeError carrying the end of
    its log, so that a benchmark can say why a peer did not run.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                   env={**os.environ, **SERVER_ENV}, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", model, process, log)
    try:
        _wait_healthy(server, timeout)
        yield server
    finally:
        _stop(process)


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited with status {server.process.returncode}: {_tail(server.log)}")
        try:
            if httpx.get(server.url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer /health within {timeout:.0f} s: {_tail(server.log)}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _tail(log: Path, lines: int = 8) -> str:
    return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])


@dataclass
class Streamed:
    """One streamed completion as the client saw it."""

    text: str
    first_token_s: float  # from sending the request to the first chunk with text
    total_s: float  # to ``data: [DONE]``
    finish_reason: str | None
    chunks: int


def stream_completion(client: httpx.Client, server: Server, body: dict[str, Any]) -> Streamed:
    """POST ``body`` to ``/v1/completions`` with ``stream: true`` and time the server-sent events."""
    started = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    finish: str | None = None
    with client.stream("POST", server.url + "/v1/completions",
                       json={"model": server.model, **body, "stream": True}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.read().decode(errors='replace')[:500]}")
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            choice = json.loads(data)["choices"][0]
            if choice.get("text"):
                first = first if first is not None else time.perf_counter() - started
                parts.append(choice["text"])
            finish = choice.get("finish_reason") or finish
    total = time.perf_counter() - started
    return Streamed("".join(parts), total if first is None else first, total, finish, len(parts))


def complete(client: httpx.Client, server: Server, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to ``/v1/completions`` (not streamed) and return the answer's JSON."""
    response = client.post(server.url + "/v1/completions", json={"model": server.model, **body})
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:500]}")
    return dict(response.json())


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, linearly interpolated (numpy's default)."""
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


def machine() -> dict[str, Any]:
    """Where a run happened: CPU count, load average at the start, date."""
    import platform

    return {"machine": f"{platform.machine()} CPU, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d %H:%M"),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}

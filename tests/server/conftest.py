"""A real ``codemask serve`` on a loopback socket: the app in uvicorn, in a thread of the test process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class Served:
    url: str
    engine: Any
    model: Any
    tokenizer: Any


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(model: Any, tokenizer: Any, name: str, **engine_options: Any) -> Iterator[Served]:
    import uvicorn

    from codemask.server import ServingEngine, create_app

    engine = ServingEngine(model, tokenizer, name, **engine_options)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield Served(f"http://127.0.0.1:{port}", engine, model, tokenizer)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()


@pytest.fixture(scope="module")
def smollm2_server(smollm2: tuple[Any, Any]) -> Iterator[Served]:
    model, tokenizer = smollm2
    yield from serve(model, tokenizer, "smollm2", max_batch=8, max_queued=32)


@pytest.fixture(scope="module")
def qwen_server() -> Iterator[Served]:
    from codemask import assets

    yield from serve(assets.load_model("qwen-coder"), assets.load_tokenizer("qwen-coder"), "qwen-coder")

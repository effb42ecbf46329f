"""codemask serve and an OpenAI client: start the server on a free port, ask it for the rest of a line
in the middle of a file (fill in the middle, with the Python grammar), and check that the file parses
with the completion in place. In an editor, point Continue or llama.vim at the same server instead."""

import ast
import socket
import subprocess
import sys
import time

import httpx
from openai import OpenAI

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
server = subprocess.Popen([sys.executable, "-m", "codemask", "serve", "--model", "smollm2", "--port", str(port)])
try:
    deadline = time.monotonic() + 300
    while True:  # the model loads before /health answers
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.5)
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
    before, after = "def area(width, height):\n    return ", "\n\nprint(area(2, 3))\n"
    answer = client.completions.create(model="smollm2", prompt=before, suffix=after, max_tokens=24, temperature=0,
                                       extra_body={"language": "python", "until": "line"})
    text = answer.choices[0].text
    ast.parse(before + text + after)
    print(repr(text), answer.choices[0].finish_reason)
finally:
    server.terminate()
    server.wait(timeout=30)

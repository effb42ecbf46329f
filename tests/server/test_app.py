"""``codemask serve`` over a real socket: the openai client, plain HTTP, streaming, batching, errors.

Outputs are checked against what ``constrained_generate`` writes for the same prompt (greedy), so
the server adds nothing and loses nothing on the way.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from codemask import Grammar, constrained_generate
from codemask.server.fim import completion_prompt
from tests.monitors.conftest import write_project
from tests.server.conftest import Served

pytestmark = pytest.mark.slow

CAT = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
       "required": ["name", "age"]}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)


def test_health_and_models(smollm2_server: Served) -> None:
    health = httpx.get(smollm2_server.url + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert [m.id for m in client(smollm2_server).models.list()] == ["smollm2"]


def test_completion_is_what_constrained_generate_writes(smollm2_server: Served) -> None:
    prompt = "def add(a, b):\n    return"
    answer = client(smollm2_server).completions.create(model="smollm2", prompt=prompt, max_tokens=16, temperature=0)
    local = constrained_generate(smollm2_server.model, smollm2_server.tokenizer, prompt, max_new_tokens=16)
    assert answer.choices[0].text == local.text
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 16


def test_streamed_chunks_add_up_to_the_whole_text(smollm2_server: Served) -> None:
    api = client(smollm2_server)
    whole = api.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=12, temperature=0)
    chunks = list(api.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=12,
                                         temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    raw = httpx.post(smollm2_server.url + "/v1/completions",
                     json={"prompt": "Hi", "max_tokens": 3, "temperature": 0, "stream": True}).text
    assert raw.rstrip().endswith("data: [DONE]")


def test_a_stream_stops_where_the_answer_stops(smollm2_server: Served) -> None:
    """A stop string is cut from the answer, and so from the stream: the newline that ends the line
    (and the indentation after it) is never sent, though the model writes it in one token."""
    api = client(smollm2_server)
    request: dict[str, Any] = {"model": "smollm2", "prompt": "def add(a, b):\n", "max_tokens": 32,
                               "temperature": 0, "stop": ["\n"]}
    whole = api.completions.create(**request).choices[0]
    chunks = list(api.completions.create(**request, stream=True))
    assert whole.finish_reason == "stop" and whole.text.strip() and "\n" not in whole.text
    assert "".join(c.choices[0].text for c in chunks) == whole.text


def test_chat_with_a_json_schema_response_format(smollm2_server: Served) -> None:
    answer = client(smollm2_server).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Describe a cat as JSON."}], temperature=0,
        max_tokens=80, response_format={"type": "json_schema", "json_schema": {"name": "cat", "schema": CAT}})
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content or ""), CAT)
    obj = client(smollm2_server).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Any JSON object."}], temperature=0, max_tokens=60,
        response_format={"type": "json_object"})
    assert isinstance(json.loads(obj.choices[0].message.content or ""), dict)


def test_a_required_tool_call_comes_back_as_tool_calls(smollm2_server: Served) -> None:
    answer = client(smollm2_server).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is the weather in Oslo?"}], temperature=0,
        max_tokens=60, tools=[WEATHER], tool_choice="required")  # type: ignore[list-item]
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert isinstance(json.loads(call.function.arguments)["city"], str)  # type: ignore[union-attr]


def test_infill_over_plain_http(smollm2_server: Served) -> None:
    """llama.cpp's /infill: a model without FIM tokens continues the prefix; ``until="line"`` with
    ``language`` ends the line so that the file parses with the suffix in place."""
    prefix, suffix = "def area(width, height):\n    return ", "\n\nprint(area(2, 3))\n"
    body = {"input_prefix": prefix, "input_suffix": suffix, "n_predict": 24, "language": "python", "until": "line"}
    answer = httpx.post(smollm2_server.url + "/infill", json=body, timeout=60).json()
    assert answer["stop"] is True and answer["stop_type"] in ("eos", "limit")
    if answer["stop_type"] == "eos":
        ast.parse(prefix + answer["content"] + suffix)
    streamed = httpx.post(smollm2_server.url + "/infill", json={**body, "stream": True}, timeout=60).text
    parts = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert "".join(p["content"] for p in parts) == answer["content"]
    context_only = httpx.post(smollm2_server.url + "/infill", json={**body, "n_predict": 0}, timeout=60)
    assert context_only.status_code == 200 and context_only.json()["content"] == ""  # llama.vim's warm-up


def test_until_line_without_a_language_stops_at_the_newline(smollm2_server: Served) -> None:
    answer = httpx.post(smollm2_server.url + "/v1/completions", json={
        "prompt": "import os\nimport", "max_tokens": 40, "temperature": 0, "until": "line"}).json()
    text = answer["choices"][0]["text"]
    assert "\n" not in text and answer["choices"][0]["finish_reason"] == "stop"


def test_concurrent_requests_are_batched_and_write_what_they_write_alone(smollm2_server: Served) -> None:
    """Eight requests at once share the batch (the engine decodes them together) and each gets the
    text it gets alone; a JSON Schema request among them keeps its grammar."""
    api = client(smollm2_server)
    prompts = [f"def function_{i}(x):\n    " for i in range(7)]

    def plain(prompt: str) -> str:
        return api.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0).choices[0].text

    def schema() -> str:
        return api.completions.create(model="m", prompt="A cat as JSON: ", max_tokens=40, temperature=0,
                                      extra_body={"json_schema": CAT}).choices[0].text

    alone = [plain(p) for p in prompts] + [schema()]
    steps = smollm2_server.engine.steps
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(plain, p) for p in prompts] + [pool.submit(schema)]
        together = [f.result() for f in futures]
    assert together == alone
    jsonschema.validate(json.loads(together[-1]), CAT)
    assert smollm2_server.engine.steps - steps < 12 * 8  # fewer steps than one request at a time


def test_seeded_sampling_and_n(smollm2_server: Served) -> None:
    api = client(smollm2_server)
    kwargs: dict[str, Any] = {"model": "m", "prompt": "Once upon a time", "max_tokens": 10, "temperature": 1.0,
                              "seed": 7}
    first, again = api.completions.create(**kwargs), api.completions.create(**kwargs)
    assert first.choices[0].text == again.choices[0].text
    several = api.completions.create(**kwargs, n=3)
    assert [c.index for c in several.choices] == [0, 1, 2]
    assert several.choices[0].text == first.choices[0].text  # sample 0 of a request is the request's own
    assert len({c.text for c in several.choices}) > 1


def test_a_client_that_goes_away_cancels_its_request(smollm2_server: Served) -> None:
    engine = smollm2_server.engine
    body = {"prompt": "Count: 1, 2, 3,", "max_tokens": 400, "temperature": 0, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", smollm2_server.url + "/v1/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        seen = [next(lines) for _ in range(6)]
    assert any(line.startswith("data: {") for line in seen)
    deadline = time.monotonic() + 20
    while engine.load["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.load["running"] == 0  # decoding stopped long before 400 tokens


@pytest.mark.parametrize(("body", "message"), [
    ({"prompt": "x", "grammar": "root ::= foo"}, "undefined rule 'foo'"),
    ({"prompt": "x", "grammar": 'root ::= ("a"'}, ":1:"),
    ({"prompt": "x", "json_schema": {"type": "strin"}}, "strin"),
    ({"prompt": "x", "regex": "(ab"}, "regex"),
    ({"prompt": "x", "until": "block"}, "needs a language"),
    ({"prompt": "x", "language": "python", "until": "line", "grammar": "json"}, "at most one"),
    ({"prompt": "x = )", "language": "python"}, "prefix"),
    ({"prompt": "x", "workspace": "/does/not/exist", "path": "a.py"}, "not a folder"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "top_p": 2}, "top_p"),
])
def test_bad_requests_are_400_with_the_reason(smollm2_server: Served, body: dict[str, Any], message: str) -> None:
    response = httpx.post(smollm2_server.url + "/v1/completions", json=body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]


def test_a_full_queue_answers_503(smollm2: tuple[Any, Any]) -> None:
    from tests.server.conftest import serve

    model, tokenizer = smollm2
    running = serve(model, tokenizer, "tiny", max_batch=1, max_queued=1)
    served = next(running)
    body = {"prompt": "Count: 1, 2,", "max_tokens": 64, "temperature": 0, "ignore_eos": True}
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            statuses = [f.result().status_code for f in
                        [pool.submit(httpx.post, served.url + "/v1/completions", json=body, timeout=120)
                         for _ in range(4)]]
    finally:
        running.close()
    assert statuses.count(200) >= 2 and 503 in statuses


def test_fim_line_completions_at_held_out_cursors_parse_in_place(qwen_server: Served) -> None:
    """Qwen2.5-Coder with its FIM tokens, ``language="python"``, ``until="line"``, at cursors inside
    statement lines of a standard-library module (not in this repository): the rest of the line
    either still ahead in the suffix, or deleted (the line being written anew). Every completion the
    model ended leaves the whole file parsing in place; most end."""
    import random
    import textwrap

    source = Path(textwrap.__file__).read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    starts = sorted({node.lineno - 1 for node in ast.walk(ast.parse(source))
                     if isinstance(node, ast.stmt) and len(lines[node.lineno - 1].strip()) > 16})
    rng = random.Random(5)
    ended = 0
    cursors = rng.sample(starts, 8)
    for n, index in enumerate(cursors):
        line = lines[index]
        cut = len(line) - len(line.lstrip()) + rng.randrange(4, len(line.strip()) - 4)
        rest_of_line = line[cut:] if n % 2 else "\n"  # odd cursors keep the rest of their line
        prefix, suffix = "".join(lines[:index]) + line[:cut], rest_of_line + "".join(lines[index + 1:])
        answer = client(qwen_server).completions.create(
            model="qwen-coder", prompt=prefix, suffix=suffix, max_tokens=48, temperature=0,
            extra_body={"language": "python", "until": "line"})
        choice = answer.choices[0]
        if choice.finish_reason == "stop":
            ended += 1
            ast.parse(prefix + choice.text + suffix)
    assert ended >= len(cursors) // 2
    assert completion_prompt(qwen_server.tokenizer, "a", "b").startswith("<|fim_prefix|>")


def test_a_workspace_and_path_turn_on_monitors(smollm2_server: Served, tmp_path: Path) -> None:
    """``workspace`` + ``path``: a language server over the project checks the names the model writes.
    Alone, SmolLM2 invents a member that ``Inventory`` lacks; monitored, it writes one it has."""
    project = write_project(tmp_path)
    prompt = (project / "main.py").read_text(encoding="utf-8") + "inv."
    body = {"prompt": prompt, "max_tokens": 6, "temperature": 0}
    plain = httpx.post(smollm2_server.url + "/v1/completions", json=body, timeout=120).json()
    monitored = httpx.post(smollm2_server.url + "/v1/completions", timeout=120,
                           json={**body, "workspace": str(project), "path": "main.py"}).json()
    members = {"capacity", "shelves", "restock_shelf", "total_quantity"}
    name = re.match(r"\w*", monitored["choices"][0]["text"])
    assert name is not None and name.group() in members, monitored
    assert re.match(r"\w*", plain["choices"][0]["text"]).group() not in members  # type: ignore[union-attr]


def test_grammar_is_shared_between_requests(smollm2_server: Served) -> None:
    """The compiled grammar is cached: a second request with the same schema compiles nothing new."""
    compiler = smollm2_server.engine.compiler
    grammar = Grammar.from_json_schema(CAT)
    compiler.compile(grammar)
    compiled = compiler.compile(grammar)
    assert compiler.compile(Grammar.from_json_schema(CAT)) is compiled

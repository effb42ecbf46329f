"""Held-out schemas and grammars: the manager's rows equal codemask's own matcher's, step after step.

Schemas come from jsonschemabench (a fixed stride through it, leaving out every schema named anywhere
in tests/), grammars from the shared grammar collection; none was written for these tests. All
requests run as one batch through vLLM's manager, each walking a seeded random path of tokens its
own mask allows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from codemask.errors import GrammarError
from codemask.grammar.grammar import Grammar
from tests.data_paths import TEST_DATA, corpus_or_skip
from tests.integrations.conftest import Engine, Oracle, allowed

TESTS = Path(__file__).resolve().parents[1]
GRAMMARS = ["gbnf/llama.cpp/arithmetic.gbnf", "gbnf/llama.cpp/chess.gbnf", "gbnf/llama.cpp/list.gbnf",
            "gbnf/llama.cpp/json_arr.gbnf", "gbnf/llguidance/vllm-sql.gbnf", "ebnf/xgrammar/builtin_json.ebnf",
            "lark/syncode/calc.lark"]
SCHEMAS = 10
STEPS = 24


def held_out_schemas() -> list[tuple[str, str]]:
    """(file name, schema text) of the first ``SCHEMAS`` schemas at a stride of 97 that no test names
    and codemask compiles (a schema it refuses is refused at validation, tested elsewhere)."""
    named = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in TESTS.rglob("*.py"))
    out = []
    for path in sorted(corpus_or_skip("jsonschemabench").glob("*.json"))[::97]:
        if path.name in named:
            continue
        schema = json.dumps(json.loads(path.read_text(encoding="utf-8"))["schema"])
        try:
            Grammar.from_json_schema(schema)
        except GrammarError:
            continue
        out.append((path.name, schema))
        if len(out) == SCHEMAS:
            break
    return out


def test_held_out_schemas_and_grammars_mask_as_codemask_does(engine: Engine) -> None:
    requests, oracles = [], {}
    for name, schema in held_out_schemas():
        request = engine.request(f"schema-{name}", json=schema)
        requests.append(request)
        oracles[request.request_id] = Oracle(engine, Grammar.from_json_schema(schema),
                                             request.sampling_params.all_stop_token_ids)
    for name in GRAMMARS:
        text = (TEST_DATA / "grammars" / name).read_text(encoding="utf-8")
        request = engine.request(f"grammar-{name}", grammar=text)
        requests.append(request)
        grammar = Grammar.from_lark(text) if name.endswith(".lark") else Grammar.from_ebnf(text)
        oracles[request.request_id] = Oracle(engine, grammar, request.sampling_params.all_stop_token_ids)
    assert len(requests) == SCHEMAS + len(GRAMMARS)

    rng = np.random.default_rng(36)
    eos = engine.tokenizer.eos_token_id
    compared = 0
    for step in range(STEPS):
        live = [r for r in requests if not r.structured_output_request.grammar.is_terminated()]
        if not live:
            break
        bitmask = engine.bitmask(live)
        for row, request in enumerate(live):
            oracle = oracles[request.request_id]
            np.testing.assert_array_equal(bitmask[row], oracle.row(), err_msg=f"{request.request_id} at step {step}")
            compared += 1
            choices = [t for t in allowed(bitmask[row]) if t != eos] or [eos]
            token = int(rng.choice(choices))
            assert engine.manager.accept_tokens(request, [token])
            assert oracle.matcher.accept_token(token)
    assert compared > STEPS * len(requests) // 2


@pytest.mark.parametrize("name", GRAMMARS)
def test_each_held_out_grammar_is_validated_by_codemask(engine: Engine, name: str) -> None:
    text = (TEST_DATA / "grammars" / name).read_text(encoding="utf-8")
    assert engine.params(grammar=text).structured_outputs._backend == "codemask"

"""codemask as vLLM 0.33's structured-output backend, driven as vLLM's StructuredOutputManager drives it.

Every request goes through vLLM's own code: SamplingParams.verify (the patched validation), the
manager's grammar_init (which constructs the backend) and compile future, grammar_bitmask (rows of
many requests in one bitmask, speculative rows), accept_tokens (with the reasoning gate) and
validate_tokens. Each row is compared with codemask's own GrammarMatcher on an independently built
vocabulary whose stop tokens are the request's.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from vllm.exceptions import VLLMValidationError

from codemask.grammar.grammar import Grammar
from codemask.integrations.vllm import CodemaskBackend, CodemaskGrammar
from tests.integrations.conftest import Engine, Oracle, allowed

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
ARITHMETIC = 'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= [0-9]+ ("*" [0-9]+)*\n'
PAIRS = 'start: pair ("," pair)*\npair: WORD "=" INT\nWORD: /[a-z]+/\nINT: /[0-9]+/\n'
TOOL_TAG = {"structures": [{"begin": "<tool_call>", "schema": PERSON, "end": "</tool_call>"}],
            "triggers": ["<tool_call>"]}

# (request constraint, the same grammar built directly, a document it accepts)
KINDS: dict[str, tuple[dict[str, Any], Grammar, str]] = {
    "json": ({"json": PERSON}, Grammar.from_json_schema(PERSON), '{"name": "Ada", "age": 36}'),
    "json_object": ({"json_object": True},
                    Grammar.from_json_schema({"type": "object", "additionalProperties": True}),
                    '{"tags": ["a", 2], "ok": true}'),
    "regex": ({"regex": r"\d{3}-[a-z]+"}, Grammar.from_regex(r"\d{3}-[a-z]+"), "123-abc"),
    "ebnf": ({"grammar": ARITHMETIC}, Grammar.from_ebnf(ARITHMETIC), "12+3*45"),
    "lark": ({"grammar": PAIRS}, Grammar.from_lark(PAIRS), "ab=1,c=23"),
    "choice": ({"choice": ["yes", "no", "maybe (so)"]}, Grammar.from_regex(r"yes|no|maybe \(so\)"), "maybe (so)"),
    "structural_tag": ({"structural_tag": json.dumps(TOOL_TAG)}, Grammar.from_structural_tag(TOOL_TAG),
                       'Let me check. <tool_call>{"name": "Ada", "age": 36}</tool_call> Done.'),
}


def stops(engine: Engine, request: Any) -> set[int]:
    return set(request.sampling_params.all_stop_token_ids)


def test_the_manager_constructs_the_codemask_backend_as_its_own(engine: Engine) -> None:
    request = engine.request("construct", json=PERSON)
    assert isinstance(engine.manager.backend, CodemaskBackend)
    assert engine.manager.backend_name == "codemask"
    assert engine.manager.backend.vocab_size == engine.vocab_size == 151_936
    assert isinstance(request.structured_output_request.grammar, CodemaskGrammar)
    assert request.sampling_params.structured_outputs._backend == "codemask"


def test_every_kind_in_one_bitmask_matches_codemask_and_ends_at_eos(engine: Engine) -> None:
    """Seven requests of seven kinds share one bitmask step after step; each row is codemask's own mask;
    each document is written token by token and the request ends at EOS."""
    tokenizer = engine.tokenizer
    requests, oracles, documents = [], {}, {}
    for name, (constraint, grammar, document) in KINDS.items():
        request = engine.request(f"kind-{name}", **constraint)
        requests.append(request)
        oracles[request.request_id] = Oracle(engine, grammar, stops(engine, request))
        documents[request.request_id] = [*tokenizer.encode(document, add_special_tokens=False), tokenizer.eos_token_id]
    step = 0
    while requests:
        bitmask = engine.bitmask(requests)
        assert bitmask.shape == (len(requests), (engine.vocab_size + 31) // 32)
        for row, request in enumerate(list(requests)):
            oracle = oracles[request.request_id]
            np.testing.assert_array_equal(bitmask[row], oracle.row(), err_msg=f"{request.request_id} step {step}")
            token = documents[request.request_id][step]
            assert token in allowed(bitmask[row])
            assert engine.manager.accept_tokens(request, [token])
            assert oracle.matcher.accept_token(token)
            grammar = request.structured_output_request.grammar
            if token == tokenizer.eos_token_id:
                assert grammar.is_terminated()
                requests.remove(request)
            else:
                assert not grammar.is_terminated()
        step += 1


def test_a_terminated_request_gets_vllms_full_row_and_ignores_tokens(engine: Engine) -> None:
    request = engine.request("done", regex="ok")
    tokenizer = engine.tokenizer
    assert engine.manager.accept_tokens(request, tokenizer.encode("ok", add_special_tokens=False))
    assert engine.manager.accept_tokens(request, [tokenizer.eos_token_id])
    grammar = request.structured_output_request.grammar
    assert grammar.is_terminated()
    assert (engine.bitmask([request]) == -1).all()  # the manager leaves finished rows unconstrained
    assert grammar.accept_tokens("done", [12, 13])  # tokens after termination are ignored, as xgrammar does
    grammar.rollback(1)  # termination counts as one token
    assert not grammar.is_terminated()


def test_eos_only_where_the_grammar_may_end(engine: Engine) -> None:
    request = engine.request("eos", regex="ab+")
    eos = engine.tokenizer.eos_token_id
    assert eos not in allowed(engine.bitmask([request])[0])
    assert not request.structured_output_request.grammar.validate_tokens([eos])
    engine.manager.accept_tokens(request, engine.tokenizer.encode("ab", add_special_tokens=False))
    assert eos in allowed(engine.bitmask([request])[0])


def test_the_requests_own_stop_tokens_and_no_others(engine: Engine) -> None:
    """A user's stop_token_ids end the request where the grammar may end; a stop token of the
    vocabulary the request does not stop at is never allowed (vLLM would not end there)."""
    tokenizer = engine.tokenizer
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token_id == im_end
    plain = engine.request("stops-default", regex="x")
    custom = engine.request("stops-custom", regex="x", stop_token_ids=[endoftext])
    assert stops(engine, custom) == {im_end, endoftext}
    x = tokenizer.encode("x", add_special_tokens=False)
    for request in (plain, custom):
        engine.manager.accept_tokens(request, x)
    rows = engine.bitmask([plain, custom])
    assert set(allowed(rows[0])) == {im_end}  # <|endoftext|> is a stop of the vocabulary, not of this request
    assert set(allowed(rows[1])) == {im_end, endoftext}
    np.testing.assert_array_equal(rows[1], _after(Oracle(engine, Grammar.from_regex("x"), stops(engine, custom)), x))
    assert custom.structured_output_request.grammar.accept_tokens("stops-custom", [endoftext])
    assert custom.structured_output_request.grammar.is_terminated()


def _after(oracle: Oracle, tokens: list[int]) -> np.ndarray:
    for token in tokens:
        assert oracle.matcher.accept_token(token)
    return oracle.row()


def test_speculative_rows_walk_the_drafts_and_roll_back(make_engine: Any) -> None:
    """With 3 speculative tokens the manager fills 1 + 3 rows per request: fill, accept a draft, …,
    then rolls back; a rejected draft's row and the rows after it repeat the last valid mask, -1
    padding leaves the rows after it unconstrained. The grammar ends where it began."""
    engine = make_engine(speculative_tokens=3)
    tokenizer = engine.tokenizer
    good = engine.request("spec-good", json=PERSON)
    bad = engine.request("spec-bad", json=PERSON)
    padded = engine.request("spec-padded", json=PERSON)
    prefix = tokenizer.encode('{"name": "', add_special_tokens=False)
    for request in (good, bad, padded):
        assert engine.manager.accept_tokens(request, prefix)
    drafts_good = tokenizer.encode('Ada", "', add_special_tokens=False)[:3]
    close, brace = (tokenizer.encode(t, add_special_tokens=False)[0] for t in ('"', "}"))
    drafts_bad = [drafts_good[0], close, brace]  # '}' cannot follow "name": "Ada": "age" is required
    drafts = {"spec-good": drafts_good, "spec-bad": drafts_bad, "spec-padded": [drafts_good[0], -1, -1]}
    before = {r.request_id: r.structured_output_request.grammar.matcher.num_accepted for r in (good, bad, padded)}
    bitmask = engine.bitmask([good, bad, padded], drafts)
    assert bitmask.shape[0] == 3 * 4

    oracle = Oracle(engine, Grammar.from_json_schema(PERSON), stops(engine, good))
    for token in prefix:
        assert oracle.matcher.accept_token(token)
    expected_good = []
    for token in drafts_good:
        expected_good.append(oracle.row())
        assert oracle.matcher.accept_token(token)
    expected_good.append(oracle.row())
    oracle.matcher.rollback(len(drafts_good))
    for k in range(4):
        np.testing.assert_array_equal(bitmask[k], expected_good[k], err_msg=f"good row {k}")

    # bad: the first two drafts are valid ('Ada' then '"' closes the string), the third ('}') is not
    # allowed right after a closed string value that must be followed by "age"
    walk = []
    for token in drafts_bad[:2]:
        walk.append(oracle.row())
        assert oracle.matcher.accept_token(token)
    walk.append(oracle.row())
    assert not oracle.matcher.accept_token(drafts_bad[2])
    oracle.matcher.rollback(2)
    for k in range(3):
        np.testing.assert_array_equal(bitmask[4 + k], walk[k], err_msg=f"bad row {k}")
    np.testing.assert_array_equal(bitmask[4 + 3], walk[2])  # the rejected draft's bonus row repeats the last valid

    np.testing.assert_array_equal(bitmask[8], expected_good[0])
    np.testing.assert_array_equal(bitmask[9], expected_good[1])
    assert (bitmask[10:12] == -1).all()  # after -1 padding vLLM leaves rows unconstrained

    after = {r.request_id: r.structured_output_request.grammar.matcher.num_accepted for r in (good, bad, padded)}
    assert after == before
    np.testing.assert_array_equal(engine.bitmask([good])[0], expected_good[0])


def test_validate_tokens_returns_the_accepted_prefix_without_advancing(make_engine: Any) -> None:
    engine = make_engine(speculative_tokens=3)
    tokenizer = engine.tokenizer
    request = engine.request("validate", regex="(ab)+")
    grammar = request.structured_output_request.grammar
    ab = tokenizer.encode("ab", add_special_tokens=False)
    x = tokenizer.encode("x", add_special_tokens=False)
    eos = tokenizer.eos_token_id
    assert engine.manager.validate_tokens(request, ab + x + ab) == ab
    assert engine.manager.validate_tokens(request, [*ab, eos, *ab]) == [*ab, eos]  # stops at termination
    assert engine.manager.validate_tokens(request, x) == []
    assert engine.manager.validate_tokens(request, [*ab, -1, *ab]) == ab  # vLLM strips speculative padding
    assert grammar.matcher.num_accepted == 0 and not grammar.is_terminated()


def test_masks_start_after_the_reasoning_ends(make_engine: Any) -> None:
    """With a reasoning parser vLLM's manager leaves rows unconstrained and keeps tokens from the
    grammar until the reasoning's end token, then the grammar starts from its first token."""
    engine = make_engine(reasoning_parser="qwen3")
    tokenizer = engine.tokenizer
    request = engine.request("think", json=PERSON, prompt=tokenizer.encode("<|im_start|>assistant\n<think>\n"))
    grammar = request.structured_output_request.grammar
    thinking = tokenizer.encode("Let me write {} and [ here", add_special_tokens=False)
    # while reasoning the row is free, except implicit ends of the reasoning (a tool call) that the
    # grammar refuses as its first token: the manager asks the backend through validate_tokens
    tool_call = tokenizer.convert_tokens_to_ids("<tool_call>")
    row = engine.bitmask([request])[0]
    assert set(range(engine.vocab_size)) - set(allowed(row)) == {tool_call}
    assert grammar.validate_tokens([tool_call]) == []
    assert engine.manager.accept_tokens(request, thinking)
    assert grammar.matcher.num_accepted == 0
    end = tokenizer.encode("</think>", add_special_tokens=False)
    assert engine.manager.accept_tokens(request, end)
    oracle = Oracle(engine, Grammar.from_json_schema(PERSON), stops(engine, request))
    np.testing.assert_array_equal(engine.bitmask([request])[0], oracle.row())
    answer = tokenizer.encode('{"name": "A", "age": 1}', add_special_tokens=False)
    assert engine.manager.accept_tokens(request, answer)
    assert grammar.matcher.num_accepted == len(answer)


def test_disable_any_whitespace_compiles_compact_json(make_engine: Any) -> None:
    engine = make_engine(disable_any_whitespace=True)
    tokenizer = engine.tokenizer
    request = engine.request("compact", json=PERSON)
    oracle = Oracle(engine, Grammar.from_json_schema(PERSON, whitespace="compact"), stops(engine, request))
    brace = tokenizer.encode("{", add_special_tokens=False)
    engine.manager.accept_tokens(request, brace)
    row = engine.bitmask([request])[0]
    np.testing.assert_array_equal(row, _after(oracle, brace))
    assert tokenizer.encode(" ", add_special_tokens=False)[0] not in allowed(row)


@pytest.mark.parametrize(("constraint", "message"), [
    ({"json": '{"type": "object", "properties": '}, "not valid JSON"),
    ({"json": {"type": "strin"}}, "strin"),
    ({"regex": "(ab"}, "regex"),
    ({"grammar": "root ::= foo"}, "foo"),
    ({"grammar": 'start: "a" undefined_rule'}, "undefined_rule"),
    ({"choice": []}, "at least one choice"),
    ({"structural_tag": json.dumps({"structures": [], "triggers": []})}, "structures"),
])
def test_bad_requests_are_refused_at_validation_with_codemasks_reason(engine: Engine, constraint: dict[str, Any],
                                                                     message: str) -> None:
    with pytest.raises(VLLMValidationError, match="codemask") as raised:
        engine.params(**constraint)
    assert message in str(raised.value) or message in str(raised.value.__cause__)

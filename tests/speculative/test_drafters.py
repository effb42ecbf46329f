"""Drafters on SmolLM2's tokenizer (no forward pass): what each proposes, and that the grammar cuts drafts."""

from __future__ import annotations

from typing import Any

import pytest

from codemask import GrammarMatcher
from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size
from codemask.grammar.resolve import as_grammar
from codemask.speculative import ChainDrafter, DraftEnv, GrammarDrafter, PromptLookupDrafter, SuffixDrafter


@pytest.fixture(scope="module")
def env(smollm2: tuple[Any, Any]) -> tuple[Any, DraftEnv, Any]:
    """The tokenizer, a drafting env and the compiler ``constrained_generate`` uses (shared vocabulary)."""
    model, tokenizer = smollm2
    compiler = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
    vocab = compiler.vocab
    return tokenizer, DraftEnv(tokenizer, vocab.token_bytes, frozenset(vocab.stop_token_ids)), compiler


def ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def test_context_drafters_copy_what_followed(env: tuple[Any, DraftEnv, Any]) -> None:
    tokenizer, draft_env, _ = env
    source = "def area(width, height):\n    return width * height\n"
    prompt = ids(tokenizer, "Copy:\n" + source + "\n")
    head = ids(tokenizer, "def area(width")
    for drafter in (SuffixDrafter(), PromptLookupDrafter()):
        state = drafter.start(prompt, draft_env)
        state.commit(head)
        draft = state.propose([], None, 6)
        assert tokenizer.decode(head + draft).startswith("def area(width, height")
    extra = SuffixDrafter(context=(source,)).start(ids(tokenizer, "Copy the file.\n"), draft_env)
    extra.commit(head)
    assert tokenizer.decode(head + extra.propose([], None, 4)).startswith("def area(width, height")


def test_grammar_forced_text_and_grammar_cuts(env: tuple[Any, DraftEnv, Any]) -> None:
    tokenizer, draft_env, compiler = env
    grammar = as_grammar('root ::= "{\\"name\\": \\"" [a-z]+ "\\", \\"size\\": " [0-9]+ "}"')
    matcher = GrammarMatcher(compiler.compile(grammar))
    forced = GrammarDrafter().start([], draft_env).propose([], matcher, 10)
    assert tokenizer.decode(forced) == '{"name": "'
    assert matcher.num_accepted == 0  # drafters do not advance the matcher
    # the prompt says the name is followed by "size: 3" in another syntax: the grammar cuts the copy
    prompt = ids(tokenizer, '{"name": "box, size: 3}')
    chain = ChainDrafter((GrammarDrafter(), SuffixDrafter(min_match=1)))
    draft = chain.start(prompt, draft_env).propose([], matcher, 12)
    probe = matcher.fork()
    assert all(probe.accept_token(t) for t in draft)
    text = tokenizer.decode(draft)
    assert text.startswith('{"name": "box') and "size: 3" not in text

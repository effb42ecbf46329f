"""The engine without a model: which tokens of the Llama-3 vocabulary a grammar allows, step by step."""

from codemask import Grammar, GrammarCompiler, GrammarMatcher, Vocabulary, allocate_token_bitmask
from codemask.assets import load_tokenizer
from codemask.engine.bitmask import unpack_bitmask

tokenizer = load_tokenizer("llama3")
compiler = GrammarCompiler(Vocabulary.from_tokenizer(tokenizer))
matcher = GrammarMatcher(compiler.compile(Grammar.builtin("json")))
bitmask = allocate_token_bitmask(1, compiler.vocab.vocab_size)

for token in tokenizer.encode('{"ok": true}', add_special_tokens=False):
    matcher.fill_next_token_bitmask(bitmask)
    allowed = unpack_bitmask(bitmask[0].numpy(), compiler.vocab.vocab_size).sum()
    print(f"{allowed:6d} tokens allowed; next: {tokenizer.decode([token])!r}")
    assert matcher.accept_token(token)
print("complete:", matcher.can_terminate(), "| forced after '{\"a\": t':", end=" ")
probe = GrammarMatcher(matcher.compiled)
probe.accept_string('{"a": t')
print(probe.find_jump_forward_bytes())

"""Code completion at a cursor, fill-in-the-middle: Qwen2.5-Coder completes one statement so that the
text before the cursor, the completion and the text after it parse together."""

import ast

from codemask import Grammar, constrained_generate
from codemask.assets import load_model, load_tokenizer

model, tokenizer = load_model("qwen-coder"), load_tokenizer("qwen-coder")
before = "def mean(values: list[float]) -> float:\n    if not values:\n        return 0.0\n"
after = "\n\nprint(mean([1.0, 2.0]))\n"
grammar = Grammar.builtin("python", prefix=before, suffix=after, until="statement")
prompt = f"<|fim_prefix|>{before}<|fim_suffix|>{after}<|fim_middle|>"
out = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=40)
ast.parse(before + out.text + after)
assert out.finish_reason == "grammar_end", out.finish_reason
print(out.text)

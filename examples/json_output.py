"""Constrained generation in three lines: SmolLM2 writes JSON that always parses."""

import json

from codemask import constrained_generate
from codemask.assets import load_model, load_tokenizer

model, tokenizer = load_model("smollm2"), load_tokenizer("smollm2")
messages = [{"role": "user", "content": "Describe a cat as a JSON object with name, age and color."}]
prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

result = constrained_generate(model, tokenizer, prompt, grammar="json", max_new_tokens=120)
print(result.text)
print(json.loads(result.text), result.finish_reason, f"{result.stats.tokens_per_s:.1f} tok/s")

"""The same grammar masks inside Hugging Face `model.generate`, here with beam search over a regex."""

import re

from transformers import LogitsProcessorList

from codemask import Grammar
from codemask.assets import load_model, load_tokenizer
from codemask.hf import grammar_logits_processor

model, tokenizer = load_model("smollm2"), load_tokenizer("smollm2")
date = Grammar.from_regex(r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])")
processor = grammar_logits_processor(tokenizer, date, model)

messages = [{"role": "user", "content": "When did Apollo 11 land on the moon? Answer with a date."}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
output = model.generate(**inputs, logits_processor=LogitsProcessorList([processor]), num_beams=3, max_new_tokens=12)
answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", answer), answer
print(answer)

"""JSON that follows a schema: a pydantic class as the grammar, so the answer always validates."""

from pydantic import BaseModel

from codemask import constrained_generate
from codemask.assets import load_model, load_tokenizer


class Cat(BaseModel):
    name: str
    age: int
    color: str


model, tokenizer = load_model("smollm2"), load_tokenizer("smollm2")
messages = [{"role": "user", "content": "Describe a cat as JSON with name, age and color."}]
out = constrained_generate(model, tokenizer, messages, grammar=Cat, max_new_tokens=80)
cat = out.parsed
assert isinstance(cat, Cat) and out.finish_reason == "grammar_end", (out.text, out.finish_reason)
print(cat)

"""The model call and its KV cache, across the transformers versions codemask supports.

Recent transformers take the cache as ``cache=`` and return it as ``output.cache``; earlier ones
call it ``past_key_values``. :func:`run_model` passes it the way the model's ``forward`` names it, so
no deprecation warning is printed and a future release that drops the old name keeps working.

Continuous batching changes the cache's batch: :func:`select_rows` keeps some rows (sequences that
finished leave), :func:`append_empty_rows` adds rows holding nothing yet (sequences that join: every
existing column is a hole their attention mask hides, and their prompt is fed like any new tokens).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch


@functools.cache
def _cache_keyword(forward: Any) -> str:
    parameters = inspect.signature(forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def new_cache(model: Any) -> Any:
    """An empty dynamic KV cache for ``model``."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def run_model(model: Any, cache: Any, **inputs: Any) -> tuple[torch.Tensor, Any]:
    """``model(**inputs)`` continuing ``cache``: the logits and the cache that holds the new tokens."""
    keyword = _cache_keyword(type(model).forward)
    with torch.inference_mode():
        out = model(**inputs, use_cache=True, **{keyword: cache})
    returned = getattr(out, "cache", None)
    return out.logits, returned if returned is not None else out.past_key_values


def _layers(cache: Any) -> list[Any]:
    layers = getattr(cache, "layers", None)
    if layers is None or any(getattr(layer, "keys", None) is None for layer in layers):
        raise TypeError(f"{type(cache).__name__} does not hold its key/value tensors per layer; continuous "
                        "batching needs a dynamic cache")
    return list(layers)


def select_rows(cache: Any, rows: list[int]) -> None:
    """Keep only the batch ``rows`` of ``cache``, in that order (in place)."""
    index = None
    for layer in _layers(cache):
        if index is None or index.device != layer.keys.device:
            index = torch.tensor(rows, dtype=torch.long, device=layer.keys.device)
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def append_empty_rows(cache: Any, count: int) -> None:
    """Add ``count`` rows of zeros at the end of the batch of ``cache`` (in place)."""
    for layer in _layers(cache):
        for name in ("keys", "values"):
            tensor = getattr(layer, name)
            shape = (count, *tensor.shape[1:])
            setattr(layer, name, torch.cat([tensor, tensor.new_zeros(shape)], dim=0))


def keep_columns(cache: Any, columns: torch.Tensor) -> None:
    """Keep only the sequence positions ``columns`` of every row (in place): drops holes no row sees."""
    for layer in _layers(cache):
        index = columns.to(layer.keys.device)
        layer.keys = layer.keys.index_select(2, index)
        layer.values = layer.values.index_select(2, index)

"""codemask inside serving engines.

- :mod:`codemask.integrations.vllm`: codemask as vLLM's structured-output backend
  (``structured_outputs_config={"backend": "codemask"}``), registered by a ``vllm.general_plugins``
  entry point, and RPG and monitors as a vLLM logits processor (``vllm.logits_processors``).
- :mod:`codemask.integrations.sglang`: the same backend for SGLang (``--grammar-backend codemask``),
  registered by an ``sglang.srt.plugins`` entry point.

Both build their grammars with :func:`codemask.integrations.specs.grammar_for` and keep each
request's state in a :class:`codemask.integrations.matching.RequestMatcher`. Importing a submodule
imports its engine; this package itself imports neither.
"""

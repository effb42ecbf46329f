"""Decoding: the loop that steps sequences over one KV cache, and the stages that act on its logits.

:class:`~codemask.decoding.loop.DecodingLoop` admits and retires sequences between steps;
:mod:`~codemask.decoding.pipeline` defines the stage and selector interfaces; the grammar stage,
sampling, the JSON repeated-item decay and the per-feature statistics live beside them.
"""

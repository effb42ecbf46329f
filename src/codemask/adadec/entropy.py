"""Shannon entropy of next-token distributions, on the logits' device."""

from __future__ import annotations

import torch


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of ``softmax(logits)`` per row of ``[rows, vocab]`` logits (``-inf`` = probability 0).

    ``H = logsumexp(z) - Σ softmax(z)·z`` over the finite logits: one pass, no ``0·log 0`` NaNs.
    """
    z = logits.float()
    log_z = torch.logsumexp(z, dim=-1, keepdim=True)
    log_p = z - log_z
    p = log_p.exp()
    terms = torch.where(p > 0, p * log_p, torch.zeros_like(p))
    return (-terms.sum(dim=-1)).clamp(min=0.0)

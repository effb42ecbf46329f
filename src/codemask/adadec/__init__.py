"""AdaDec — uncertainty-guided pause-and-rerank ("Towards Better Code Generation: Adaptive Decoding
with Uncertainty Guidance", SYSUSELab).

``config`` holds the settings and the per-model entropy threshold τ, ``entropy`` the device-side
entropy, ``selector`` the pause-and-rerank step (a pipeline selector with batched KV-cache
rollouts) and ``calibrate`` learns τ from reference solutions.
"""

from codemask.adadec.config import AdaDec, load_threshold, model_identity, store_threshold
from codemask.adadec.entropy import entropy
from codemask.adadec.selector import AdaDecSelector, KVBranch

__all__ = ["AdaDec", "AdaDecSelector", "KVBranch", "entropy", "load_threshold", "model_identity",
           "store_threshold"]

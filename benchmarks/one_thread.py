"""Imported by the benchmarks before numpy, torch and the engines: each engine runs on one thread
(no spinning OpenMP threads, no Rust or tokenizers pools, whose idle spinning took the other core
from the engine being timed), and nothing reaches for the model hub. Settings made outside win."""

import os

for _name, _value in {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1",
                      "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}.items():
    os.environ.setdefault(_name, _value)

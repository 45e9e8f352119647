"""Preference pairs and masked DPO on CoA trajectories.

``pairs`` builds chosen/rejected pairs from the K samples per task of a ``coa eval -k K``
run (``coa pairs``); ``trainer`` runs DPO on them (``coa train dpo``), scoring only the
tokens the model generated. ``config``, ``data``, ``loss`` and ``reference`` are the pieces
the trainer reads top to bottom. Importing this package imports no torch.
"""

from trainers.dpo.config import DPOConfig, load_config
from trainers.dpo.pairs import (
    PairOptions,
    PairReport,
    PairsError,
    PreferencePair,
    build_pairs,
    read_pairs,
    read_run,
    write_pairs,
)
from trainers.dpo.trainer import DPOResult, train

__all__ = ["DPOConfig", "DPOResult", "PairOptions", "PairReport", "PairsError", "PreferencePair",
           "build_pairs", "load_config", "read_pairs", "read_run", "train", "write_pairs"]

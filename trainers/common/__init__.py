"""Plumbing every trainer shares: the config loader, the checkpointer, the metrics logger.

``config`` (YAML + ``key=value`` into sectioned dataclasses, one :class:`ConfigError`),
``checkpoint`` (atomic ``checkpoint-<step>`` directories, ``resume: latest``, RNG),
``metrics`` (``metrics.jsonl`` + TensorBoard), ``sections`` (the shared ``bookkeeping``
section), ``mixture`` (several envs by weight), ``threads`` (torch threads for one run).
Stdlib + PyYAML at import time; torch loads inside the functions that need it.
"""

from trainers.common.checkpoint import Checkpointer
from trainers.common.config import ConfigError, build_section, check_fields, deep_merge, load_config
from trainers.common.metrics import MetricsLogger, read_metrics
from trainers.common.sections import Bookkeeping
from trainers.common.threads import torch_threads

__all__ = ["Bookkeeping", "Checkpointer", "ConfigError", "MetricsLogger", "build_section",
           "check_fields", "deep_merge", "load_config", "read_metrics", "torch_threads"]

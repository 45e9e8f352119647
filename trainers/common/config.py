"""The trainers' config loader, now :mod:`coa_envs.configkit` (a leaf every layer may import).

Kept so ``from trainers.common.config import load_config`` goes on working; new code imports
the toolkit from :mod:`coa_envs.configkit`.
"""

from coa_envs.configkit import (
    ConfigError,
    build_section,
    check_fields,
    check_value,
    deep_merge,
    describe_type,
    fits_type,
    load_config,
    load_mapping,
    merge_mappings,
    parse_overrides,
    parse_value,
)

__all__ = ["ConfigError", "build_section", "check_fields", "check_value", "deep_merge", "describe_type",
           "fits_type", "load_config", "load_mapping", "merge_mappings", "parse_overrides", "parse_value"]

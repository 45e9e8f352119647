"""Adapters that let other trainers train on coa envs: TRL's GRPO trainer
(:mod:`trainers.adapters.trl_grpo`) and verifiers environments (:mod:`trainers.adapters.verifiers_env`).
Each imports its library lazily."""

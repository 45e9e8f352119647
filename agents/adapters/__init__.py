"""Adapters that let other agent frameworks drive coa envs (see :mod:`agents.adapters.smol`)."""

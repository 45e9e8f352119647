"""The env-version policy holds for every registered id: a reward term past its first VERSION
changed scores, so each id that carries one says so in its ``version_note`` ("gaia v2"), and
the note is where an id that kept its number explains why (MiniWeb: no gold of its generated
worlds is infinite, so gaia v2 changes none of its scores). ``coa/GAIA-v0`` carried gaia v2
with neither a bump nor a note; fails on main before the bump.
"""

from __future__ import annotations

import importlib

import pytest

from coa_envs.registry import entry, ids


def _terms(reward: dict) -> list[str]:
    return [t["name"] for t in reward["terms"]] if "terms" in reward else [reward["name"]]


@pytest.mark.parametrize("env_id", ids())
def test_an_id_names_every_changed_term_it_carries(env_id):
    item = entry(env_id)
    for name in _terms(item["reward"]):
        version = importlib.import_module(f"coa_envs.rewards.{name}").VERSION
        if version > 1:
            assert f"{name} v{version}" in (item.get("version_note") or ""), (env_id, name, version)


def test_gaia_carries_its_scorer_change_in_a_bumped_id():
    assert "coa/GAIA-v1" in ids() and "coa/GAIA-v0" not in ids()

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
    assert "coa/GAIA-v1" in ids()


def test_gaia_v0_still_makes_the_same_env_and_says_it_is_out_of_date():
    """``gym.make("coa/GAIA-v0")`` is the call the project's users write (the README and the
    CoA docs name it): removing the id broke it with DeprecatedEnv. It is kept for one minor
    release with v1's scorer (a scorer that paid any non-number against an infinite gold is
    not worth keeping) and Gymnasium's out-of-date warning naming v1."""
    import gymnasium as gym

    from tests.env_fixtures import MAKE_KWARGS

    kwargs = MAKE_KWARGS["coa/GAIA-v1"]
    with pytest.warns(DeprecationWarning, match="GAIA-v0 is out of date"):
        old = gym.make("coa/GAIA-v0", **kwargs)
    new = gym.make("coa/GAIA-v1", **kwargs)
    try:
        old_item, new_item = entry("coa/GAIA-v0"), entry("coa/GAIA-v1")
        for key in ("family", "tasks", "tools", "reward", "prompt", "max_turns"):
            assert old_item[key] == new_item[key], key
        first_old, _ = old.reset(seed=0)
        first_new, _ = new.reset(seed=0)
        assert first_old == first_new
    finally:
        old.close()
        new.close()

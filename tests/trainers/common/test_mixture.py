"""Env mixtures: the entries a config names, their checks, and the weighted draw."""

from __future__ import annotations

import re

import pytest

from trainers.common import ConfigError
from trainers.common.mixture import check_env_ids, choose, mixture_entries


def _entries(*pairs):
    return mixture_entries([{"id": i, "weight": w} for i, w in pairs], "envs")


def test_draws_follow_the_weights_and_are_a_function_of_seed_step_slot():
    entries = _entries(("coa/SynthHop-v0", 3), ("coa/NQ-v1", 1))
    draws = [choose(entries, 7, step, slot) for step in range(1, 501) for slot in range(4)]
    assert abs(draws.count(0) / len(draws) - 0.75) < 0.03
    assert draws == [choose(entries, 7, step, slot) for step in range(1, 501) for slot in range(4)]
    assert draws != [choose(entries, 8, step, slot) for step in range(1, 501) for slot in range(4)]


def test_zero_weight_is_never_drawn_and_one_env_needs_no_draw():
    entries = _entries(("coa/SynthHop-v0", 0), ("coa/NQ-v1", 2))
    assert {choose(entries, 0, step, 0) for step in range(300)} == {1}
    assert choose(_entries(("coa/NQ-v1", 1)), 0, 5, 0) == 0


def test_names_default_to_the_id_and_must_be_distinct():
    entries = _entries(("coa/SynthHop-v0", 1), ("coa/NQ-v1", 1))
    assert [e.name for e in entries] == ["SynthHop-v0", "NQ-v1"]
    with pytest.raises(ConfigError, match="two entries are named 'NQ-v1'"):
        _entries(("coa/NQ-v1", 1), ("coa/NQ-v1", 1))
    renamed = mixture_entries([{"id": "coa/NQ-v1"}, {"id": "coa/NQ-v1", "name": "nq_small",
                                                      "env_kwargs": {"task_options": {"limit": 5}}}],
                              "envs")
    assert [e.name for e in renamed] == ["NQ-v1", "nq_small"]


@pytest.mark.parametrize(("raw", "message"), [
    ([{"id": "coa/SynthHop-v0", "weight": 0}, {"id": "coa/NQ-v1", "weight": 0}],
     "the weights sum to 0; they must sum to a positive number"),
    ([{"id": "coa/NQ-v1", "weight": -1}], "weight=-1.0 must be a number >= 0"),
    ([{"id": "coa/NQ-v1", "weight": "heavy"}], "must be a number"),
    ([{"id": "coa/NQ-v1", "wieght": 1}], "unknown key 'envs[0].wieght'"),
    ([], "envs is empty"),
    ("coa/NQ-v1", "must be a list"),
    ([{"weight": 1}], "missing 1 required positional argument: 'id'"),
])
def test_bad_entries_are_config_errors(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        mixture_entries(raw, "envs")


def test_unknown_env_ids_name_the_closest_registered_ones():
    with pytest.raises(ConfigError, match=r"unknown env id 'coa/SynthHop-v9' \(did you mean "
                                          r"'coa/SynthHop-v1'\?\)"):
        check_env_ids(_entries(("coa/SynthHop-v9", 1)), "envs")
    check_env_ids(_entries(("coa/SynthHop-v0", 1), ("coa/MATH500-v1", 1)), "envs")

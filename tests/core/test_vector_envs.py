"""Gymnasium's vector envs over coa ids, in both modes: ``gym.make_vec(..., "async")`` used to
return every observation as a 1,000,000-character string of ``'0'`` (shared memory for Text)."""

from __future__ import annotations

import copy
import multiprocessing

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from coa_envs.spaces import SharedTexts, TextSpace

ENV = "coa/MATH500-v1"
ACTIONS = ["<answer>\\boxed{0}</answer>", "<code>print('héllo ✓ 日本 \\U0001f600')</code>"]


def _single(seed: int) -> tuple[str, str]:
    """What one env gives for ``seed``: the reset observation, then the observation of ACTIONS[1]."""
    env = gym.make(ENV)
    first, _ = env.reset(seed=seed)
    second = env.step(ACTIONS[1])[0]
    env.close()
    return first, second


def test_shared_memory_round_trips_any_unicode_text_and_reads_as_a_live_view():
    space = TextSpace(max_length=64)
    memory = gym.vector.utils.create_shared_memory(space, n=3, ctx=multiprocessing.get_context("fork"))
    view = gym.vector.utils.read_from_shared_memory(space, memory, n=3)
    assert tuple(view) == ("", "", "")  # an unwritten slot is empty, not 64 x '0'
    texts = ["plain", "héllo ✓ 日本 \U0001f600 <observation>", "x" * 64]
    for index, text in enumerate(texts):
        gym.vector.utils.write_to_shared_memory(space, index, text, memory)
    assert isinstance(view, SharedTexts) and list(view) == texts  # written after the read: a view
    snapshot = copy.deepcopy(view)
    gym.vector.utils.write_to_shared_memory(space, 0, "later", memory)
    assert snapshot == tuple(texts) and isinstance(snapshot, tuple) and view[0] == "later"
    with pytest.raises(ValueError, match="cannot hold"):
        gym.vector.utils.write_to_shared_memory(space, 1, "y" * 65, memory)


@pytest.mark.parametrize("mode, vector_kwargs", [("async", {}), ("async", {"shared_memory": False}), ("sync", {})],
                         ids=["async-shared-memory", "async-no-shared-memory", "sync"])
def test_make_vec_gives_what_single_envs_give(mode, vector_kwargs):
    envs = gym.make_vec(ENV, num_envs=2, vectorization_mode=mode, vector_kwargs=vector_kwargs)
    try:
        observations, info = envs.reset(seed=[3, 4])
        expected = [_single(3), _single(4)]
        assert list(observations) == [e[0] for e in expected] and len(info["task_id"]) == 2
        observations, _, terminated, _, _ = envs.step(ACTIONS)
        assert bool(terminated[0]) and not terminated[1]
        assert observations[1] == expected[1][1] and "héllo ✓ 日本 \U0001f600" in observations[1]
    finally:
        envs.close()

"""Dynamic sampling refills a step until it holds ``prompts_per_step`` informative groups,
or until its rounds or its time budget run out, and says what it drew and what it kept."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainers.rl.config import load_config


def _config(out: Path, **algorithm):
    values = {
        "algorithm": {"name": "dapo", "prompts_per_step": 2, "group_size": 2, "minibatch_size": 4,
                      "dynamic_sampling": True, **algorithm},
        "model": {"path": "tiny"},
        "env": {"id": "coa/SynthHop-v0", "max_turns": 2},
        "rollout": {"max_new_tokens": 8, "max_response_tokens": 48},
        "resources": {"use_ray": False, "micro_batch_size": 2},
        "bookkeeping": {"output_dir": str(out), "tensorboard": False},
    }
    return load_config(values=values)


class _Tasks:
    """Task indices in order; a task's index decides its rewards (see ``_Rollouts``)."""

    def __init__(self, count: int):
        self.order = list(range(count))

    def next(self):
        return self.order.pop(0)

    def state_dict(self):
        return {"left": len(self.order)}


class _Rollouts:
    """Tasks 0-5 are always solved (all-equal groups); tasks >= 6 are solved by sample 0 only."""

    def __init__(self, clock=None):
        self.calls = 0
        self.clock = clock

    def run(self, jobs, purpose="train"):
        from agents.trajectory import Trajectory

        self.calls += 1
        if self.clock is not None:
            self.clock["now"] += 10.0
        made = []
        for job in jobs:
            reward = 1.0 if job.task_index < 6 or job.sample_index == 0 else 0.0
            t = Trajectory(env_id="t", task_id=str(job.task_index), prompt_ids=[1], reward=reward,
                           info={"group_id": job.group_id, "task_index": job.task_index})
            t.add_generated("x", [2, 3], [0.0, 0.0])
            made.append(t)
        return made, {}


def test_refill_draws_until_the_step_holds_enough_informative_groups(tmp_path):
    from trainers.rl.loop import collect_groups

    cfg = _config(tmp_path, max_sampling_rounds=10)
    rollouts = _Rollouts()
    batch = collect_groups(cfg, [_Tasks(20)], rollouts, step=1)
    # rounds draw 2, 2, 2 (all solved: tasks 0-5), then tasks 6 and 7 (informative)
    assert [{t.task_id for t in g} for g in batch.groups] == [{"6"}, {"7"}]
    stats = batch.stats
    assert stats["sampling/groups_drawn"] == 8 and stats["sampling/groups_kept"] == 2
    assert stats["sampling/groups_filtered_all_equal"] == 6 and stats["sampling/rounds"] == 4
    assert stats["sampling/kept_share"] == pytest.approx(2 / 8)
    assert stats["sampling/kept_pass_rate"] == pytest.approx(0.5)  # what the batch trains on
    assert stats["sampling/drawn_pass_rate"] == pytest.approx((6 * 1.0 + 2 * 0.5) / 8)
    assert stats["sampling/time_budget_hit"] == 0.0


def test_refill_stops_at_its_time_budget_and_trains_on_what_it_holds(tmp_path, monkeypatch):
    from trainers.rl import loop

    clock = {"now": 0.0}
    monkeypatch.setattr(loop.time, "perf_counter", lambda: clock["now"])
    cfg = _config(tmp_path, max_sampling_rounds=10, sampling_time_budget_s=25.0)
    rollouts = _Rollouts(clock)  # every round takes 10 s
    batch = loop.collect_groups(cfg, [_Tasks(20)], rollouts, step=1)
    assert rollouts.calls == 3 and batch.groups == []  # 30 s >= 25 s: no fourth round
    assert batch.stats["sampling/time_budget_hit"] == 1.0
    assert batch.stats["sampling/groups_drawn"] == 6 and batch.stats["sampling/groups_kept"] == 0


def test_the_time_budget_cannot_be_negative(tmp_path):
    from trainers.rl.config import ConfigError

    with pytest.raises(ConfigError, match="sampling_time_budget_s"):
        _config(tmp_path, sampling_time_budget_s=-1.0)

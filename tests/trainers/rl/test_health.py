"""Rollout-health metrics against hand-counted episodes, and every alarm on a run built to
trigger it (and quiet on one that is not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.trajectory import Trajectory
from trainers.rl.health import AlarmMonitor, AlarmSpec, HealthSection, health_stats


def _episode(turns, *, tool_calls=0, tool_errors=None, answer=None, truncated=False,
             terms=None) -> Trajectory:
    t = Trajectory(env_id="e", task_id="t", prompt_ids=[1], tool_calls={"wiki_search": tool_calls},
                   tool_errors=dict(tool_errors or {}), answer=answer, truncated=truncated,
                   info={"reward_details": {"terms": terms or {}}})
    for text, logprobs in turns:
        t.add_generated(text, list(range(len(logprobs))), logprobs)
        t.add_observation("<observation>...</observation>", [9])
    return t


def test_health_stats_hand_counted():
    search = "<think>x</think><wiki_search>{}</wiki_search>"
    a = _episode([(search.format("Paris"), [-1.0, -1.0]), (search.format(" paris "), [-2.0]),
                  ("<answer>Paris</answer>", [-0.5])],
                 tool_calls=2, tool_errors={"wiki_search": 1}, answer="Paris",
                 terms={"f1": {"weighted": 1.0}, "overlong": {"weighted": -0.25}})
    b = _episode([("<wiki_search></wiki_search>", [-3.0]), ("garbage", [-3.0])],
                 tool_calls=0, tool_errors={"action": 2}, truncated=True,
                 terms={"f1": {"weighted": 0.0}, "overlong": {"weighted": 0.0}})
    stats = health_stats([a, b])
    assert stats["health/tool_failure_rate"] == pytest.approx(1 / 2)  # 1 failed of 2 calls
    # the second Paris search repeats the first (case and spaces aside)
    assert stats["health/repeated_query_rate"] == pytest.approx(1 / 2)
    assert stats["health/truncation_rate"] == pytest.approx(1 / 2)
    assert stats["health/format_violation_rate"] == pytest.approx(2 / 5)  # 2 of 5 turns
    assert stats["health/answer_chars"] == 5 and stats["health/answered_share"] == 0.5
    # mean negative logprob over the 6 sampled tokens
    assert stats["health/rollout_entropy"] == pytest.approx((1 + 1 + 2 + 0.5 + 3 + 3) / 6)
    assert stats["health/reward_term/f1"] == pytest.approx(0.5)
    assert stats["health/reward_term/overlong"] == pytest.approx(-0.125)
    assert health_stats([]) == {}


def _run(monitor: AlarmMonitor, rows: list[dict]) -> list[dict]:
    """Feed a synthetic run's metrics to the monitor step by step, as the loop does."""
    flags = []
    for step, row in enumerate(rows, start=1):
        flags.append(monitor.observe(step, row)[0])
    return flags


DEFAULTS = HealthSection().alarms


def _healthy(step: int) -> dict:
    row = {"policy/entropy": 2.0 + 0.01 * (step % 2), "rollout/reward_mean": 0.3 + 0.01 * step,
           "health/format_violation_rate": 0.05}
    if step % 3 == 0:
        row["eval/heldout_reward_mean"] = 0.3 + 0.01 * step
    return row


def test_a_healthy_run_raises_no_alarm(tmp_path):
    flags = _run(AlarmMonitor(DEFAULTS, tmp_path), [_healthy(s) for s in range(1, 21)])
    assert all(v == 0 for row in flags for v in row.values())
    assert not (tmp_path / "alarms.jsonl").exists()


def test_entropy_collapse_fires(tmp_path, capsys):
    entropy = [2.0, 2.1, 1.9, 1.5, 1.0, 0.6, 0.4, 0.3, 0.2]
    flags = _run(AlarmMonitor(DEFAULTS, tmp_path), [{"policy/entropy": e} for e in entropy])
    fired = [row["alarm/entropy_collapse"] for row in flags]
    # from step 8 the last three (0.6, 0.4, 0.3) average below 0.3 x the first three's 2.0
    assert fired == [0, 0, 0, 0, 0, 0, 0, 1, 1]
    assert "ALARM entropy_collapse at step 8" in capsys.readouterr().err
    logged = [json.loads(line) for line in (tmp_path / "alarms.jsonl").read_text().splitlines()]
    assert [(r["step"], r["alarm"]) for r in logged] == [(8, "entropy_collapse")]  # once


def test_reward_rising_while_heldout_falls_fires(tmp_path):
    rows = []
    for step in range(1, 13):
        row = {"rollout/reward_mean": 0.2 if step <= 6 else 0.2 + 0.1 * (step - 6)}
        if step in (6, 12):
            row["eval/heldout_reward_mean"] = 0.5 if step == 6 else 0.4
        rows.append(row)
    flags = _run(AlarmMonitor(DEFAULTS, tmp_path), rows)
    fired = [row["alarm/reward_up_heldout_down"] for row in flags]
    assert fired[:11] == [0] * 11 and fired[11] == 1
    # the same run with the held-out reward holding up is quiet
    rows[11]["eval/heldout_reward_mean"] = 0.52
    assert not any(r["alarm/reward_up_heldout_down"] for r in _run(AlarmMonitor(DEFAULTS), rows))


def test_format_violations_rising_fires(tmp_path):
    rates = [0.02, 0.03, 0.02, 0.05, 0.1, 0.2, 0.25, 0.3]
    flags = _run(AlarmMonitor(DEFAULTS, tmp_path),
                 [{"health/format_violation_rate": r} for r in rates])
    fired = [row["alarm/format_violations_rising"] for row in flags]
    assert fired == [0, 0, 0, 0, 0, 0, 1, 1]  # +0.15 over the starting mean from step 7


def test_alarms_are_configurable_and_above_below_levels_work():
    spec = [AlarmSpec("too_many_truncations", "health/truncation_rate", "above", 0.5, 2),
            AlarmSpec("no_tools", "rollout/tool_calls", "below", 0.1, 1)]
    flags = _run(AlarmMonitor(spec), [{"health/truncation_rate": 0.2, "rollout/tool_calls": 1.0},
                                      {"health/truncation_rate": 0.9, "rollout/tool_calls": 0.0}])
    assert flags[0] == {"alarm/too_many_truncations": 0.0, "alarm/no_tools": 0.0}
    assert flags[1] == {"alarm/too_many_truncations": 1.0, "alarm/no_tools": 1.0}


def test_a_resumed_run_keeps_the_starting_means(tmp_path):
    history = [{"step": s, "policy/entropy": 2.0} for s in range(1, 4)]
    monitor = AlarmMonitor(DEFAULTS, tmp_path, history=history)
    flags = _run(monitor, [{"policy/entropy": 0.3}] * 3)  # steps "1-3" after the resume
    assert flags[-1]["alarm/entropy_collapse"] == 1


def test_an_alarm_with_stop_ends_the_run_after_a_checkpoint(tmp_path):
    """A real tiny run whose alarm is built to fire at once (a random policy's turns are all
    format violations): it stops after step 1, checkpointed, without a final model."""
    pytest.importorskip("torch")
    from tests.trainers.rl.tiny_runs import metric_rows as _rows
    from tests.trainers.rl.tiny_runs import tiny_run_config as _config
    from trainers.rl.loop import train

    out = tmp_path / "run"
    alarm = {"name": "format", "metric": "health/format_violation_rate", "kind": "above",
             "threshold": 0.5, "window": 1, "stop": True}
    last = train(_config(out, **{"health.alarms": [alarm], "bookkeeping.eval_every": 0}))
    assert last["alarm/format"] == 1.0 and last["health/format_violation_rate"] > 0.5
    assert [r["step"] for r in _rows(out)] == [1]
    assert (out / "checkpoint-1" / "COMPLETE").exists() and not (out / "final").exists()
    logged = json.loads(Path(out / "alarms.jsonl").read_text().splitlines()[0])
    assert logged["alarm"] == "format" and logged["stop"] is True

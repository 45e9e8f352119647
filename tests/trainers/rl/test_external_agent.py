"""RL through the gateway: the shipped examples (a plain ``openai``-client ReAct loop and a
smolagents ToolCallingAgent) play SynthHop as external agents and the loop trains on their
sessions: token-exact (the learner's recomputed logprobs match the recorded ones), grouped
per task, and written where ``coa view`` opens them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the gateway needs the [serve] extra")
pytest.importorskip("openai", reason="needs the [llm] extra")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = {"react": ("rl_gateway_react.yaml", "gateway_react_agent.py:react_agent"),
            "smolagents": ("rl_gateway_smolagents.yaml", "gateway_smolagents.py:smolagents_agent")}


def _train(example: str, out: Path, **overrides):
    from trainers.rl.config import load_config
    from trainers.rl.loop import train

    config_file, agent = EXAMPLES[example]
    values = {"bookkeeping.output_dir": str(out), "rollout.agent": str(ROOT / "examples" / agent), **overrides}
    config = load_config(ROOT / "examples" / config_file, [f"{k}={v}" for k, v in values.items()])
    train(config)
    return config


def _check_run(out: Path, steps: int, group_size: int) -> list[dict]:
    from agents.trajectory import Trajectory
    from agents.viewer import ViewerData

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in metrics if "train/episodes" in m]
    assert len(trained) == steps
    for step in trained:
        assert step["train/episodes"] >= step["sampling/groups_kept"] * group_size
        # the learner's logprobs of the recorded ids are the engine's: the record is token-exact
        assert step["mismatch/logprob_abs_diff"] < 1e-4
    rows = [json.loads(line) for line in (out / "gateway" / "rollouts_w0.jsonl").read_text().splitlines()]
    sessions = {row["info"]["gateway"]["session_id"] for row in rows}
    assert len(sessions) == steps * trained[0]["sampling/groups_kept"] * group_size
    for row in rows:
        trajectory = Trajectory.from_dict(row)
        assert trajectory.has_token_ids and trajectory.env_id == "coa/SynthHop-v1"
        assert trajectory.info["gateway"]["tokens"] == "exact"
        assert 0 < sum(trajectory.loss_mask()) < len(trajectory.loss_mask()) + 1
    groups: dict[tuple[int, int], set[str]] = {}
    for row in rows:  # group ids restart every step; the weights version tells the steps apart
        groups.setdefault((row["info"]["weights_version"], row["info"]["group_id"]), set()).add(row["task_id"])
    assert all(len(tasks) == 1 for tasks in groups.values())  # a group is samples of one task
    (info,) = ViewerData([out]).runs_info()
    assert any(f["path"] == "gateway/rollouts_w0.jsonl" for f in info["files"])
    assert info["episodes"] >= len(rows)
    return rows


def test_rl_trains_the_openai_react_example_through_the_gateway(tmp_path):
    config = _train("react", tmp_path / "react", **{"algorithm.total_steps": 2})
    rows = _check_run(tmp_path / "react", 2, config.algorithm.group_size)
    # ChatML is append-only and the ReAct loop echoes replies: one segment per session
    assert {row["info"]["gateway"]["layout"] for row in rows} == {"append_only"}
    assert all(len(row["info"]["gateway"]["calls"]) >= 2 for row in rows)


def snooping_agent(task, record: str, **_: object) -> str:
    """An agent program that looks for its group's siblings before it answers (``record``: a
    file it appends what it saw to: the loop loads this file as a module of its own)."""
    import httpx

    listed = httpx.get(f"{task.gateway_url}/sessions")
    with open(record, "a", encoding="utf-8") as handle:
        handle.write(json.dumps([listed.status_code, listed.text]) + "\n")
    return "a guess"


def test_an_agent_in_the_rl_loop_cannot_list_its_siblings_sessions(tmp_path):
    """The group's agents play one task at once through one gateway: listing the sessions would
    show the siblings' ids, and a finished sibling's outcome holds the answer it was paid for
    (the loop serves the gateway with an admin token no agent holds)."""
    record = tmp_path / "snooped.jsonl"
    config = _train("react", tmp_path / "snoop", **{
        "rollout.agent": f"{Path(__file__)}:snooping_agent", "rollout.agent_kwargs": f"{{record: '{record}'}}",
        "algorithm.total_steps": 1, "algorithm.prompts_per_step": 1, "algorithm.group_size": 2,
        "algorithm.minibatch_size": 2, "resources.micro_batch_size": 2})
    snooped = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(snooped) >= config.algorithm.group_size
    assert all(status == 401 and "sess-" not in text for status, text in snooped), snooped


def test_rl_trains_the_smolagents_example_through_the_gateway(tmp_path):
    config = _train("smolagents", tmp_path / "smol", **{
        "algorithm.total_steps": 1, "algorithm.prompts_per_step": 1, "algorithm.group_size": 2,
        "algorithm.minibatch_size": 2, "resources.micro_batch_size": 2,
        "rollout.agent_kwargs": "{max_steps: 1, max_tokens: 16}"})
    rows = _check_run(tmp_path / "smol", 1, config.algorithm.group_size)
    # smolagents' final-answer call renders a different history: split into token-exact segments
    assert any(row["info"]["gateway"]["layout"] == "split" for row in rows)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("example", ["react", "smolagents"])
def test_rl_trains_smollm2_through_the_gateway(example, tmp_path, smollm2_dir):
    """The real model inside both agents: two GRPO steps on SynthHop (measured on the loaded
    2-core machine: ~5 min for the ReAct loop; smolagents' ~3k-token prompts take longer)."""
    prompts = 2 if example == "react" else 1
    config = _train(example, tmp_path / example, **{
        "model.path": "smollm2-135m", "algorithm.total_steps": 2,
        "algorithm.prompts_per_step": prompts, "algorithm.group_size": 2, "algorithm.minibatch_size": 2 * prompts,
        "algorithm.lr": 1e-6, "resources.micro_batch_size": 1, "rollout.max_response_tokens": 512,
        "rollout.max_new_tokens": 48, "rollout.agent_kwargs": "{max_steps: 2, max_tokens: 48}"})
    _check_run(tmp_path / example, 2, config.algorithm.group_size)

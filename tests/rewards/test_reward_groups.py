"""Group terms over the K samples of one task: the arithmetic, re-scoring, truncated and failed
samples, and the ``coa eval -k`` path that scores them after the episodes."""

from __future__ import annotations

import json

import pytest

from agents.episode import EpisodeRecorder
from agents.evaluation import play_tasks
from agents.group_rewards import episode_view, score_groups
from agents.metrics import group_by_task, summarize
from agents.rollout import episode_seed
from agents.trajectory import EpisodeStatus, Trajectory
from coa_envs.rewards import EpisodeView, build_reward
from coa_envs.types import Task

TASK = Task("t", "q", gold=("Seine",))
GROUP_REWARD = {"terms": [{"name": "em_f1"}, {"name": "group_length", "weight": 0.5},
                          {"name": "overlong", "weight": 1.0, "max_length": 100, "buffer": 20}]}


def scored(reward, answer: str, tokens: int) -> tuple[EpisodeView, dict]:
    """A sample the env scored: its view (with token counts) and its reward_details."""
    base = EpisodeView(task=TASK, answer=answer, response_tokens=tokens)
    details = dict(reward.score_episode(base).details)
    return EpisodeView(task=TASK, answer=answer, response_tokens=tokens,
                       primary_score=details["terms"]["em_f1"]["score"]), details


def test_k_samples_get_group_terms_added_to_their_episode_reward():
    reward = build_reward(GROUP_REWARD)
    samples = [scored(reward, "Seine", 40), scored(reward, "Seine", 90), scored(reward, "Loire", 60),
               scored(reward, "Seine", 60)]
    results = reward.score_group([v for v, _ in samples], [d for _, d in samples])
    # group_length: lambda = 0.5 - (L - 40) / 50 -> 0.5, -0.5, 0.1 (wrong: min(0, .) = 0), 0.1
    # overlong: 0 up to 80 tokens, then (80 - L) / 20 -> 0, -0.5, 0, 0
    expected = [1 + 0.5 * 0.5, 1 + 0.5 * -0.5 - 0.5, 0.0, 1 + 0.5 * 0.1]
    assert [r.score for r in results] == pytest.approx(expected)
    terms = results[1].details["terms"]
    assert terms["group_length"]["score"] == pytest.approx(-0.5) and terms["group_length"]["version"] == 1
    assert terms["overlong"]["details"] == {"length": 90, "max_length": 100, "buffer": 20}
    assert "pending" not in terms["group_length"] and terms["em_f1"]["score"] == 1.0
    # Scoring again (e.g. a resumed eval) replaces the group terms: same numbers.
    again = reward.score_group([v for v, _ in samples], [r.details for r in results])
    assert [r.score for r in again] == pytest.approx(expected)


def test_a_truncated_sample_has_no_episode_terms_but_gets_the_group_terms():
    reward = build_reward(GROUP_REWARD)
    answered = scored(reward, "Seine", 50)
    cut = EpisodeView(task=TASK, answer=None, response_tokens=100, hit_token_budget=True)
    results = reward.score_group([answered[0], cut], [answered[1], None])
    assert results[1].score == pytest.approx(0.5 * -0.5 - 1.0)  # longest of the group, and at the cap
    assert results[1].details["primary"] == "em_f1" and "em_f1" not in results[1].details["terms"]


def test_a_failing_group_term_scores_zero_for_every_sample_and_the_rest_still_counts():
    reward = build_reward(GROUP_REWARD)
    text_only = [EpisodeView(task=TASK, answer="Seine", segments=(("generated", "x" * n),), primary_score=1.0)
                 for n in (10, 20)]
    details = [reward.score_episode(v).details for v in text_only]
    results = reward.score_group(text_only, details)
    assert [r.score for r in results] == pytest.approx([1 + 0.25, 1 - 0.25])  # chars: group_length still works
    assert all("needs token counts" in r.details["terms"]["overlong"]["error"] for r in results)
    assert all(r.details["terms"]["overlong"]["score"] == 0.0 for r in results)


def _trajectory(sample: int, answer: str | None, text: str, status=EpisodeStatus.OK) -> Trajectory:
    reward = build_reward(GROUP_REWARD)
    recorder = EpisodeRecorder.start("coa/SynthHop-v0", "prompt", {"task_id": "t"}, sample_index=sample,
                                     prompt_ids=[1, 2])
    recorder.generated(text, token_ids=list(range(len(text))))
    if status is EpisodeStatus.OK:
        result = reward.score_episode(EpisodeView(task=TASK, answer=answer))
        recorder.step("", result.score, True, False, {"answer": answer, "reward_details": dict(result.details)})
    else:
        recorder.end(status)
    return recorder.finish()


def test_score_groups_over_trajectories_leaves_failed_episodes_out():
    group = [_trajectory(0, "Seine", "a" * 30), _trajectory(1, "Seine", "b" * 50),
             _trajectory(2, None, "c" * 10, EpisodeStatus.ERROR_ENGINE_TIMEOUT),
             _trajectory(3, None, "d" * 100, EpisodeStatus.TRUNCATED_RESPONSE_TOKENS)]
    assert episode_view(group[3]).hit_token_budget and episode_view(group[0]).response_tokens == 30
    assert score_groups([group], build_reward(GROUP_REWARD)) == 3
    # tokens 30, 50, 100: lambda 0.5, 0.2857, -0.5; overlong only on the cut one (-1)
    assert [t.reward for t in group] == pytest.approx([1.25, 1 + 0.5 * (0.5 - 20 / 70), 0.0, -0.25 - 1.0])
    assert "reward_details" not in group[2].info  # the failed episode is not part of the group
    assert summarize("coa/SynthHop-v0", group, samples=4)["accuracy"] == 0.5  # the primary term decides


def test_no_group_terms_changes_nothing():
    group = [_trajectory(0, "Seine", "abc")]
    before = (group[0].reward, json.dumps(group[0].info["reward_details"]))
    assert score_groups([group], build_reward({"name": "em_f1"})) == 0
    assert (group[0].reward, json.dumps(group[0].info["reward_details"])) == before


class _Padded:
    """Answers at once, with a think span of ``pad`` characters, right or wrong."""

    def __init__(self, env, pad: int, right: bool):
        self.env, self.pad, self.right = env.unwrapped, pad, right

    def reset(self, observation, info):
        pass

    def act(self, observation, info):
        gold = self.env.task.gold[0]
        answer = gold if self.right else "z" * len(gold)  # the same length either way
        return f"<think>{'x' * self.pad}</think><answer>{answer}</answer>"


def test_the_eval_k_path_scores_group_terms_after_the_episodes(tmp_path):
    import gymnasium as gym

    make_kwargs = {"task_options": {"split": "test"},
                   "reward": {"terms": [{"name": "em_f1"}, {"name": "format", "weight": 0.1},
                                        {"name": "group_length", "weight": 0.5}]}}
    probe = gym.make("coa/SynthHop-v0", **make_kwargs)
    tasks = list(probe.unwrapped.tasks)
    probe.close()
    plan = {(0, 0): (10, True), (0, 1): (30, True), (0, 2): (50, False), (1, 0): (20, False),
            (1, 1): (20, False), (1, 2): (20, True)}
    by_seed = {episode_seed(0, i, k): value for (i, k), value in plan.items()}
    out = tmp_path / "trajectories.jsonl"
    result = play_tasks("coa/SynthHop-v0", make_kwargs, lambda env, seed: _Padded(env, *by_seed[seed]), tasks,
                        indices=[0, 1], samples=3, out=out, concurrency=2, seed=0)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(w["task_id"], w["sample_index"]) for w in written] == [
        (tasks[i].task_id, k) for i in (0, 1) for k in range(3)]  # sorted, and the scored versions
    groups = group_by_task(result.trajectories)
    first = [t.reward for t in groups[tasks[0].task_id]]
    # chars grow by 20 per sample: lambda 0.5, 0, -0.5; the third is wrong. Format 1.0 each (0.1).
    assert first == pytest.approx([1 + 0.1 + 0.25, 1 + 0.1 + 0.0, 0 + 0.1 - 0.25])
    assert [t.reward for t in groups[tasks[1].task_id]] == pytest.approx([0.1, 0.1, 1.1])  # equal lengths: 0
    assert [w["reward"] for w in written[:3]] == pytest.approx(first)
    assert written[0]["info"]["reward_details"]["terms"]["group_length"]["details"]["unit"] == "chars"
    summary = summarize("coa/SynthHop-v0", result.trajectories, samples=3)
    assert summary["accuracy"] == pytest.approx((2 / 3 + 1 / 3) / 2) and summary["pass_at_k"]["3"] == 1.0

"""One recorder, one status vocabulary: eval and RL record the same episodes the same way.

The agreement test drives the same scripted model through ``coa eval``'s path (the
concurrent runner over ``LLMPolicy``) and through the RL rollout worker (batched, tool
calls on a thread pool, token ids appended by the worker), then compares the summaries.
It needs no torch: a character-level tokenizer and a scripted engine stand in for the model.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from agents.engines import Completion, EngineErrorKind, find_stop
from agents.episode import EpisodeRecorder, run_episode
from agents.metrics import summarize
from agents.trajectory import EpisodeStatus, Trajectory, read_trajectories

ENV_ID = "coa/MATH500-v1"
# A benchmark test set: the RL worker, which plays split=train unless told, is told "test".
ENV_KWARGS = {"tools": {"code": {"backend": "subprocess"}}, "task_options": {"split": "test"}}
MAX_TURNS = 3


class CharTokenizer:
    """One token per character: a tokenizer whose ids anyone can read back."""

    eos_token_id = 0

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, return_dict=False):
        text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages)
        text += "<|assistant|>" if add_generation_prompt else ""
        return self.encode(text) if tokenize else text

    def encode(self, text, add_special_tokens=False):
        return [ord(ch) for ch in text]


class ScriptedEngine:
    """Answers each episode from its script: turn k of the task whose question is in the
    context (k = observations so far); ``None`` in a script is an engine failure."""

    name = "scripted"

    def __init__(self, scripts: dict[str, list[str | None]]):
        self.scripts = scripts

    def generate(self, requests, params):
        out = []
        for request in requests:
            context = "".join(map(chr, request.token_ids))
            script = next(s for question, s in self.scripts.items() if question in context)
            text = script[min(context.count("\n<observation>\n"), len(script) - 1)]
            if text is None:
                out.append(Completion.failure(EngineErrorKind.HTTP_ERROR, "503 from the scripted server"))
                continue
            stop = find_stop(text, (request.params or params).stop)
            ids = tuple(ord(ch) for ch in text)
            out.append(Completion(text=text, token_ids=ids, logprobs=(-0.5,) * len(ids),
                                  stop_string=stop[1] if stop else None))
        return out


def _scripts(env) -> dict[str, list[str | None]]:
    tasks = env.unwrapped.tasks
    return {
        tasks[0].question: ["<code>print(1+1)</code>", f"<answer>{tasks[0].gold[0]}</answer>"],
        tasks[1].question: ["<think>no action here</think>", "<answer>surely wrong</answer>"],
        tasks[2].question: ["<wiki_search>q</wiki_search>", "<code>print(2)</code>", "<code>print(2)</code>"],
        tasks[3].question: [None],
        tasks[4].question: [f"<answer>{tasks[4].gold[0]}</answer>"],
    }


def _eval_path(scripts) -> list[Trajectory]:
    from agents.policy import LLMPolicy
    from agents.rollout import run_rollouts

    engine, tokenizer = ScriptedEngine(scripts), CharTokenizer()
    result = run_rollouts(lambda: gym.make(ENV_ID, max_turns=MAX_TURNS, **ENV_KWARGS),
                          lambda env, seed: LLMPolicy(engine, tokenizer, seed=seed),
                          task_indices=range(len(scripts)), concurrency=2)
    return sorted(result.trajectories, key=lambda t: t.task_id)


def _rl_path(scripts) -> tuple[list[Trajectory], dict[str, int]]:
    from trainers.rl.config import load_config
    from trainers.rl.rollout import EpisodeJob, RolloutWorker

    config = load_config(values={
        "env": {"id": ENV_ID, "kwargs": ENV_KWARGS, "max_turns": MAX_TURNS},
        "rollout": {"episodes_in_flight": 2, "tool_threads": 2, "max_new_tokens": 256,
                    "max_response_tokens": 100_000},
        "resources": {"torch_threads": 0, "use_ray": False},
        "bookkeeping": {"eval_every": 0}})
    worker = RolloutWorker(config, engine=ScriptedEngine(scripts), tokenizer=CharTokenizer())
    try:
        result = worker.run([EpisodeJob(i, i, 0, 100 + i) for i in range(len(scripts))])
    finally:
        worker.close()
    return sorted(result.trajectories, key=lambda t: t.task_id), result.errors


# What differs by design: wall time, and the record's size (RL keeps the token record of
# what the model saw, so the observation after a truncation, never seen, is not in it).
_NOT_COMPARED = ("wall_s", "episodes_per_min", "tokens_per_episode", "chars_per_episode")


def test_eval_and_rl_record_the_same_scripted_episodes_alike():
    probe = gym.make(ENV_ID, **ENV_KWARGS)
    scripts = _scripts(probe)
    probe.close()
    evaluated = _eval_path(scripts)
    rolled, rl_errors = _rl_path(scripts)

    assert [t.task_id for t in evaluated] == [t.task_id for t in rolled]
    for a, b in zip(evaluated, rolled, strict=True):
        assert (a.status, a.reward, a.answer, a.tool_calls, a.tool_errors) == \
               (b.status, b.reward, b.answer, b.tool_calls, b.tool_errors), a.task_id
        assert a.info.get("reward_details") == b.info.get("reward_details")
    eval_summary, rl_summary = summarize(ENV_ID, evaluated), summarize(ENV_ID, rolled)
    for key in _NOT_COMPARED:
        eval_summary.pop(key), rl_summary.pop(key)
    assert eval_summary == rl_summary

    # ...and the figures are the scripted ones, so both paths could not agree by being empty.
    assert rl_summary["status_counts"] == {"ok": 3, "truncated:max_turns": 1, "error:engine_http_error": 1}
    assert rl_summary["errors"] == 1 and rl_summary["truncated"] == 1 and rl_summary["solved"] == 2
    assert rl_summary["tool_calls"] == {"code": 3, "wiki_search": 1}
    # the unavailable tool, the repeated code call, and the turn with no action at all
    assert rl_summary["tool_errors"] == {"wiki_search": 1, "code": 1, "action": 1}
    assert rl_errors == {"engine_http_error": 1}
    assert all(t.info["reward_details"] for t in rolled if t.terminated)  # RL keeps the breakdown
    assert all(t.has_token_ids for t in rolled if t.segments)


def test_status_vocabulary_covers_every_engine_error_and_env_truncation():
    assert {EpisodeStatus.engine_error(kind) for kind in EngineErrorKind} <= set(EpisodeStatus)
    assert all(EpisodeStatus.engine_error(kind).is_error for kind in EngineErrorKind)
    assert EpisodeStatus.engine_error(None) is EpisodeStatus.ERROR_ENGINE_INTERNAL
    assert EpisodeStatus.truncation("max_turns") is EpisodeStatus.TRUNCATED_MAX_TURNS
    assert EpisodeStatus.truncation("context_budget") is EpisodeStatus.TRUNCATED_CONTEXT_BUDGET
    assert EpisodeStatus.truncation(None) is EpisodeStatus.TRUNCATED_UNKNOWN
    with pytest.raises(ValueError, match="unknown episode status 'exploded'; allowed: ok, "):
        EpisodeStatus.parse("exploded")


def test_old_trajectory_files_read_into_the_new_vocabulary(tmp_path):
    """Files from before the vocabulary was unified: the three loops' own spellings."""
    old = {"agent_error": "error:agent", "env_error": "error:env", "engine_error": "error:engine_internal",
           "truncated:None": "truncated:unknown", "error:agent": "error:agent",
           "truncated:max_turns": "truncated:max_turns", "ok": "ok"}
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps({"env_id": "e", "task_id": f"t{i}", "status": status}) + "\n"
                            for i, status in enumerate(old)))
    loaded = list(read_trajectories(path))
    assert [t.status for t in loaded] == [EpisodeStatus(v) for v in old.values()]
    summary = summarize("e", loaded)
    assert (summary["errors"], summary["truncated"]) == (4, 2)


def test_recorder_counts_parallel_calls_per_tool_and_keeps_the_first_ending():
    recorder = EpisodeRecorder.start("e", "prompt", {"task_id": "t"})
    recorder.generated("<code>a</code><code>b</code><wiki_search>c</wiki_search>")
    recorder.step("obs", 0.0, False, False, {"tool": ["code", "code", "wiki_search"],
                                              "tool_error_kinds": [None, "tool_timeout", "tool_error"],
                                              "error_kind": "tool_timeout", "tool_latency_s": 0.5})
    recorder.observation("obs")
    recorder.step("", 0.0, False, False, {"tool": [], "error_kind": "bad_action"})
    assert not recorder.done
    recorder.step("", 1.0, True, False, {"tool": [], "answer": "42", "reward_details": {"em": 1.0}})
    recorder.end(EpisodeStatus.ERROR_AGENT, error="too late")  # the env's ending stands
    trajectory = recorder.finish()
    assert trajectory.tool_calls == {"code": 2, "wiki_search": 1}
    assert trajectory.tool_errors == {"code": 1, "wiki_search": 1, "action": 1}
    assert (trajectory.status, trajectory.reward, trajectory.answer) == (EpisodeStatus.OK, 1.0, "42")
    assert trajectory.info["reward_details"] == {"em": 1.0} and "error" not in trajectory.info
    assert trajectory.info["tool_latency_s"] == 0.5 and trajectory.num_turns == 1


def test_run_episode_reports_an_env_that_raises_as_an_env_error():
    class Exploding(gym.Wrapper):
        def step(self, action):
            raise RuntimeError("tool backend died")

    env = Exploding(gym.make(ENV_ID))
    trajectory = run_episode(env, lambda obs, info: "<code>print(1)</code>", options={"task_index": 0})
    env.close()
    assert trajectory.status is EpisodeStatus.ERROR_ENV and "tool backend died" in trajectory.info["error"]


def test_the_oracle_refuses_a_task_without_a_gold_answer():
    """LiveCodeBench's shipped tasks carry tests, not solutions (and a served env hides answers
    unless asked): the oracle says so instead of answering "" and scoring a silent 0."""
    import gymnasium as gym

    from agents.episode import run_episode
    from agents.oracle import OracleAgent

    env = gym.make("coa/LiveCodeBench-v4")
    try:
        trajectory = run_episode(env, OracleAgent(env), seed=0)
    finally:
        env.close()
    assert trajectory.status == "error:agent"
    assert "needs the gold answer" in trajectory.info["error"] and "--expose-answers" in trajectory.info["error"]

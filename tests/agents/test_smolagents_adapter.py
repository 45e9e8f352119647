"""A real agent framework (smolagents) drives coa envs through their own tools."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest

pytest.importorskip("smolagents", reason="needs the [agents-framework] extra")

import coa_envs  # noqa: F401
from agents.adapters.smol import answer_action, oracle_tool_model, run_smolagents_episode
from coa_envs.protocol import parse_turn


@pytest.mark.parametrize("task_index", [0, 1, 2])
def test_scripted_smolagents_model_solves_synthhop(task_index):
    env = gym.make("coa/SynthHop-v0")
    env.reset(options={"task_index": task_index})
    model = oracle_tool_model(env.unwrapped.task)
    trajectory = run_smolagents_episode(env, model, options={"task_index": task_index})
    env.close()
    assert trajectory.status == "ok" and trajectory.reward == 1.0
    assert trajectory.tool_calls.get("wiki_search", 0) >= 1
    # The framework's moves are recorded as valid CoA turns with env observations between.
    kinds = [s.kind for s in trajectory.segments]
    assert kinds[-1] == "generated" and kinds.count("observation") == kinds.count("generated") - 1
    for segment in trajectory.segments:
        if segment.kind == "generated":
            assert parse_turn(segment.text).ok


@pytest.mark.parametrize("final", ["<think>Paris", "Paris</answer>", "<answer>Paris</answer>",
                                   "Paris <observation>", "Paris\ud800"])
def test_a_final_answer_with_protocol_markup_still_answers_the_episode(final):
    """A framework's final answer is free text: protocol tags a model wrote into it must not make
    the answer action malformed (the episode then ended unanswered, as error:agent)."""
    env = gym.make("coa/SynthHop-v0")
    env.reset(options={"task_index": 0})
    gold = env.unwrapped.task.gold[0]
    model = oracle_tool_model(SimpleNamespace(metadata={}, gold=[final.replace("Paris", gold)]))
    trajectory = run_smolagents_episode(env, model, options={"task_index": 0})
    env.close()
    assert trajectory.status == "ok" and trajectory.terminated, trajectory.info
    assert trajectory.reward == 1.0 and trajectory.answer.startswith(gold)


@pytest.mark.parametrize(("text", "action"), [
    ("a <b>bold</b> answer", "<answer>a <b>bold</b> answer</answer>"),  # not protocol markup: kept
    ("<think></think>", "<answer>(no answer)</answer>"),
    ("x <my_tool>q</my_tool>", "<answer>x  q</answer>"),  # an env's own tool tag
])
def test_answer_actions_keep_the_text_and_drop_only_protocol_tags(text, action):
    assert answer_action(text, ("my_tool",)) == action
    assert parse_turn(action, extra_tools=("my_tool",)).ok


def test_smolagents_against_coa_serve_end_to_end(tiny_dir):
    """The real path: smolagents' OpenAIServerModel -> coa serve (tiny model) -> env tools.
    A random model cannot solve the task; the run must still finish with a clear status."""
    from smolagents import OpenAIServerModel

    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    engine = HFEngine(str(tiny_dir))
    app = create_app(engine, engine.tokenizer, "tiny")
    with serve_in_thread(app) as url:
        model = OpenAIServerModel(model_id="tiny", api_base=url, api_key="x", max_tokens=12)
        env = gym.make("coa/SynthHop-v0")
        trajectory = run_smolagents_episode(env, model, options={"task_index": 0}, max_steps=2)
        env.close()
    assert sum(app.state.engine.batch_sizes) >= 2  # the server answered the framework
    assert trajectory.status == "ok" and trajectory.terminated, trajectory.info  # info["error"] says why
    assert trajectory.reward == 0.0 and trajectory.answer


def test_our_agents_package_is_not_shadowed():
    """openai-agents would install a top-level `agents`; we ship smolagents instead."""
    import agents

    assert Path(agents.__file__).resolve().parent == Path(__file__).resolve().parents[2] / "agents"


def _json_tool_model(tokenizer, plans: dict[str, list[str]]):
    """A causal LM for ``coa serve`` that writes, for the task whose question is in its
    prompt, the next JSON tool call of that task's plan and then ``<|im_end|>``. Its
    forward runs like a model's (one row per request, a fresh cache per generate call);
    only the logits are scripted, because no offline model can solve the task."""
    import torch

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    calls: dict[str, int] = {}

    class JsonToolLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(1))
            self.config = SimpleNamespace(max_position_embeddings=8192)
            self.generation_config = SimpleNamespace(eos_token_id=eos)
            self._cache, self.script, self.step = None, [eos], 0

        @property
        def device(self):
            return self.anchor.device

        def forward(self, input_ids, past_key_values=None, attention_mask=None, **_: object):
            if past_key_values is not self._cache:  # a new request: pick its next tool call
                self._cache, self.step = past_key_values, 0
                text = tokenizer.decode(input_ids[0].tolist())
                question = next(q for q in plans if q in text)
                turn = calls.get(question, 0)
                calls[question] = turn + 1
                plan = plans[question]
                self.script = [*tokenizer.encode(plan[min(turn, len(plan) - 1)], add_special_tokens=False), eos]
            token = self.script[min(self.step, len(self.script) - 1)]
            self.step += 1
            logits = torch.full((input_ids.shape[0], 1, len(tokenizer)), -30.0)
            logits[:, :, token] = 30.0
            return SimpleNamespace(logits=logits)

    return JsonToolLM()


def test_smolagents_solves_synthhop_through_coa_serve(tiny_tokenizer):
    """The whole path: smolagents' OpenAIServerModel -> HTTP -> coa serve (hf engine) ->
    text tool calls parsed by smolagents -> env tools (real BM25 retrieval) -> reward 1."""
    import json

    from smolagents import OpenAIServerModel

    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread
    env = gym.make("coa/SynthHop-v0")
    plans = {}
    for index in (0, 1):
        task = env.unwrapped.tasks[index]
        plan = []
        for action in task.metadata["oracle_actions"]:
            turn = parse_turn(action)
            plan += [json.dumps({"name": c.tool, "arguments": {"query": c.query}}) for c in turn.tool_calls]
            if turn.answer is not None:
                plan.append(json.dumps({"name": "final_answer", "arguments": {"answer": turn.answer}}))
        plans[task.question] = plan
    engine = HFEngine(_json_tool_model(tiny_tokenizer, plans), tiny_tokenizer)
    app = create_app(engine, tiny_tokenizer, "scripted")
    with serve_in_thread(app) as url:
        model = OpenAIServerModel(model_id="scripted", api_base=url, api_key="x", max_tokens=200)
        for index in (0, 1):
            trajectory = run_smolagents_episode(env, model, options={"task_index": index})
            assert trajectory.status == "ok" and trajectory.reward == 1.0, trajectory.info
            assert trajectory.tool_calls["wiki_search"] == len(plans[env.unwrapped.task.question]) - 1
    env.close()
    assert sum(app.state.engine.batch_sizes) == sum(len(p) for p in plans.values())


def _thinking_model(task, bad_thought: str | None = None, plan: str = "1. find the page\n2. read the answer"):
    """A scripted smolagents model that plans, says why before each call, then calls."""
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        Model,
    )

    script = []
    for action in task.metadata["oracle_actions"]:
        turn = parse_turn(action)
        script += [(c.tool, {"query": c.query}) for c in turn.tool_calls]
        if turn.answer is not None:
            script.append(("final_answer", {"answer": turn.answer}))

    class Thinker(Model):
        def __init__(self) -> None:
            super().__init__(model_id="thinker")
            self.step = 0

        def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
            if tools_to_call_from is None:
                return ChatMessage(role=MessageRole.ASSISTANT, content=plan)
            name, arguments = script[min(self.step, len(script) - 1)]
            self.step += 1
            thought = bad_thought if bad_thought and self.step == 1 else f"Next I use {name} on {arguments}."
            call = ChatMessageToolCall(id=f"c{self.step}", type="function",
                                       function=ChatMessageToolCallFunction(name=name, arguments=arguments))
            return ChatMessage(role=MessageRole.ASSISTANT, content=thought, tool_calls=[call])

    return Thinker()


def test_framework_plans_and_thoughts_become_coa_role_spans():
    env = gym.make("coa/SynthHop-v0")
    env.reset(options={"task_index": 0})
    model = _thinking_model(env.unwrapped.task)
    trajectory = run_smolagents_episode(env, model, options={"task_index": 0},
                                        agent_kwargs={"planning_interval": 1})
    assert trajectory.status == "ok" and trajectory.reward == 1.0
    generated = [parse_turn(s.text) for s in trajectory.segments if s.kind == "generated"]
    assert all(turn.ok for turn in generated)
    roles = [[role.tag for role in turn.roles] for turn in generated]
    assert roles[0][:1] == ["plan"] and all("think" in r for r in roles)  # a plan first, a thought per call
    assert generated[-1].answer is not None and trajectory.info["dropped_notes"] == 0
    # A thought that would break the turn's grammar is left out (and counted), not sent.
    env.reset(options={"task_index": 0})
    broken = run_smolagents_episode(env, _thinking_model(env.unwrapped.task, "maybe <answer>x</answer>"),
                                    options={"task_index": 0})
    env.close()
    assert broken.reward == 1.0 and broken.info["dropped_notes"] == 1
    assert "maybe" not in broken.response_text


def test_notes_never_cost_the_action_and_errors_without_a_tool_are_counted():
    env = gym.make("coa/SynthHop-v0")
    env.reset(options={"task_index": 0})
    # plan + thought together pass the turn length limit: the notes go, the calls stay.
    model = _thinking_model(env.unwrapped.task, bad_thought="why " * 10_000, plan="step " * 8_000)
    trajectory = run_smolagents_episode(env, model, options={"task_index": 0}, agent_kwargs={"planning_interval": 1})
    env.close()
    assert trajectory.reward == 1.0 and trajectory.info["dropped_notes"] >= 2
    assert "action" not in trajectory.tool_errors  # no turn had to be corrected
    assert all(parse_turn(s.text).ok for s in trajectory.segments if s.kind == "generated")

"""CoAEnv behaviour that every family shares: corrective observations, limits, info fields."""

from __future__ import annotations

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from coa_envs.types import ErrorKind


@pytest.fixture
def env():
    environment = gym.make("coa/AIME24-v1")
    environment.reset(seed=0)
    yield environment
    environment.close()


def test_reset_picks_task_from_seed_or_task_id():
    env = gym.make("coa/MATH500-v1")
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert len(ids) > 1
    first = env.unwrapped.tasks[3].task_id
    assert env.reset(options={"task_id": first})[1]["task_id"] == first
    with pytest.raises(KeyError):
        env.reset(options={"task_id": "no-such-task"})


def test_reset_info_carries_chat_messages_and_tools(env):
    _, info = env.reset(seed=1)
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert info["tools"] == ["code"]
    assert "<code>" in info["messages"][0]["content"]


def test_code_tool_observation_is_rendered_like_the_seed(env):
    observation, reward, terminated, truncated, info = env.step("<code>print(6*7)</code>")
    assert observation == "\n<observation>\n42\n</observation>\n\n"
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["tool"] == ["code"] and info["tool_error_kinds"] == [None]
    assert info["error_kind"] is None and info["tool_latency_s"] > 0


def test_info_tool_is_always_a_list_aligned_with_its_error_kinds():
    """One shape for every step: no call, one call, parallel calls (a failing one among them)."""
    env = gym.make("coa/AIME24-v1", allow_parallel_tools=True, tools={"code": {"backend": "subprocess"}})
    env.reset(seed=0)
    try:
        *_, info = env.step("<think>no closing tag")
        assert info["tool"] == [] and info["tool_error_kinds"] == [] and info["error_kind"] == "bad_action"
        *_, info = env.step("<code>print(1)</code>\n<wiki_search>x</wiki_search>")
        assert info["tool"] == ["code", "wiki_search"]
        assert info["tool_error_kinds"] == [None, "tool_not_available"]
        assert info["error_kind"] == "tool_not_available" and len(info["tool_result_details"]) == 2
        *_, info = env.step("<answer>1</answer>")
        assert info["tool"] == [] and info["tool_error_kinds"] == []
    finally:
        env.close()


def test_malformed_action_is_a_corrective_observation(env):
    observation, reward, terminated, truncated, info = env.step("<think>no closing tag")
    assert not terminated and not truncated and reward == 0.0
    assert info["error_kind"] == ErrorKind.BAD_ACTION and info["protocol_error"] == "unclosed_tag"
    assert "Invalid action" in observation and "<code>" in observation


def test_unavailable_tool_is_reported(env):
    observation, *_, info = env.step("<web_search>weather</web_search>")
    assert info["error_kind"] == ErrorKind.TOOL_NOT_AVAILABLE and "not available" in observation


def test_repeated_identical_query_gets_already_asked(env):
    env.step("<code>print(1)</code>")
    observation, *_, info = env.step("<code>print(1)</code>")
    assert info["error_kind"] == ErrorKind.REPEATED_QUERY and "already" in observation


def test_code_errors_are_observations_not_crashes(env):
    observation, *_, info = env.step("<code>raise ValueError('boom')</code>")
    assert "ValueError: boom" in observation and info["error_kind"] == ErrorKind.TOOL_ERROR


def test_truncated_at_max_turns():
    env = gym.make("coa/AIME24-v1", max_turns=2)
    env.reset(seed=0)
    assert env.step("<think>x</think>")[3] is False
    _, _, terminated, truncated, info = env.step("<think>y</think>")
    assert truncated and not terminated and info["truncation"] == "max_turns"


def test_truncated_at_context_budget():
    env = gym.make("coa/AIME24-v1", context_budget_chars=3000)
    env.reset(seed=0)
    _, _, _, truncated, info = env.step("<think>" + "z" * 3000 + "</think>")
    assert truncated and info["truncation"] == "context_budget"


def test_reward_that_raises_gives_zero_and_reward_error(monkeypatch, env):
    def broken(prediction, task):
        raise RuntimeError("judge exploded")

    monkeypatch.setattr(env.unwrapped, "_reward", broken)
    _, reward, terminated, _, info = env.step("<answer>1</answer>")
    assert terminated and reward == 0.0 and "judge exploded" in info["reward_error"]


def test_step_after_the_end_does_not_crash(env):
    env.unwrapped.step("<answer>1</answer>")
    _, reward, terminated, _, info = env.unwrapped.step("<answer>1</answer>")
    assert terminated and reward == 0.0 and info["error_kind"] == ErrorKind.BAD_ACTION


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"max_turn": 3}, "unknown option 'max_turn' (did you mean 'max_turns'?)"),
        ({"max_turns": 0}, "max_turns=0 is not valid"),
        ({"tools": {"code": {"backend": "quantum"}}}, "tools.code.backend='quantum' is not valid; allowed:"),
        ({"tools": {"telepathy": {}}}, "tools.telepathy is not a CoA tool; allowed:"),
        ({"reward": {"name": "vibes"}}, "reward.name='vibes' is not valid; allowed:"),
        ({"prompt": "nope"}, "prompt='nope' is not valid; allowed:"),
        ({"context_budget_tokens": 100}, "context_budget_tokens needs tokenizer"),
        ({"context_budget_chars": "2k"}, "context_budget_chars='2k' is not valid; allowed: a positive integer or None"),
        ({"allow_parallel_tools": "yes"}, "allow_parallel_tools='yes' is not valid; allowed: true or false"),
        ({"render_mode": "human"}, "render_mode='human' is not valid; allowed: 'ansi' or None"),
        ({"task_options": ["limit", 3]}, "task_options=['limit', 3] is not valid; allowed: a mapping"),
    ],
)
def test_bad_make_options_fail_at_make_time_naming_the_key(overrides, fragment):
    with pytest.raises(ValueError, match=None) as error:
        gym.make("coa/AIME24-v1", **overrides)
    assert fragment in str(error.value)


def test_unknown_env_id_lists_close_matches():
    with pytest.raises(gym.error.Error) as error:
        gym.make("coa/AIME42-v0")
    assert "AIME" in str(error.value)


def test_overrides_apply(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"question": "What is 2+2?", "answer": "4"}\n{"question": "3*3?", "answer": ["9"]}\n')
    env = gym.make("coa/MATH500-v1", data_path=str(data), max_turns=3)
    assert len(env.unwrapped.tasks) == 2 and env.unwrapped.config.max_turns == 3
    env.reset(options={"task_index": 1})
    assert env.step("<answer>\\boxed{9}</answer>")[1] == 1.0


def test_data_file_with_missing_field_names_file_row_and_field(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"question": "ok", "answer": "1"}\n{"answer": "2"}\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl: row 2: field 'question' is missing"):
        gym.make("coa/MATH500-v1", data_path=str(data))


def test_env_config_validates_itself_whoever_builds_it():
    """The checks live in EnvConfig.__post_init__, not in the registry's builder."""
    import dataclasses

    from coa_envs.config import EnvConfig

    config = gym.make("coa/AIME24-v1").unwrapped.config
    with pytest.raises(ValueError, match="max_observation_chars=0 is not valid; allowed: a positive integer"):
        dataclasses.replace(config, max_observation_chars=0)
    with pytest.raises(ValueError, match=r"family='poetry' is not valid; allowed: \['code', "):
        EnvConfig(env_id="coa/Poetry-v0", family="poetry", reward={"name": "em_f1"})


def test_every_setting_is_declared_once_and_listed():
    """Registry keys, gym.make keys and `coa list --options` all come from the fields."""
    import dataclasses

    from coa_envs.config import OVERRIDE_KEYS, REGISTRY_KEYS, TASK_OVERRIDES, EnvConfig, build_config
    from coa_envs.registry import entry

    fields = dataclasses.fields(EnvConfig)
    assert all(f.metadata["doc"] for f in fields)
    from coa_cli.listing import option_rows

    listed = {row["key"] for row in option_rows()}
    assert listed == {f.metadata["key"] or f.name for f in fields} | set(TASK_OVERRIDES)
    assert listed.issuperset(OVERRIDE_KEYS) and listed.issuperset(REGISTRY_KEYS)
    with pytest.raises(ValueError, match=r"unknown option 'max_turn' \(did you mean 'max_turns'\?\); "
                                         r"allowed: allow_parallel_tools"):
        build_config({**entry("coa/AIME24-v1"), "max_turn": 3}, {})

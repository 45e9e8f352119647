"""protocol: tools (OpenAI function calling) beside the tag grammar: the same tools, rewards,
limits and info; actions are assistant messages with tool_calls, observations tool messages;
every malformed message is a corrective observation, never a crash."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import coa_envs  # noqa: F401
from coa_envs.protocol import parse_turn
from coa_envs.protocols.tools import arguments_to_query, function_definition, parse_message, query_to_arguments
from coa_envs.tools import tool_names, tool_spec

SYNTHHOP = {"task_options": {"difficulty": "easy", "num_tasks": 8},
            "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}}}


def _call(name: str, arguments, call_id: str = "call_1", content: str | None = None) -> dict:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"role": "assistant", "content": content,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def _as_message(tag_action: str) -> dict:
    """The tools-protocol twin of a tag-protocol oracle turn."""
    parsed = parse_turn(tag_action)
    if parsed.answer is not None:
        return {"role": "assistant", "content": f"<answer>{parsed.answer}</answer>"}
    (call,) = parsed.tool_calls
    parameter = tool_spec(call.tool).parameter
    return _call(call.tool, {parameter: call.query})


def test_every_tool_is_a_function_described_by_its_own_spec():
    for name in tool_names():
        spec, definition = tool_spec(name), function_definition(name)
        assert definition["name"] == name and definition["description"] == spec.summary
        assert definition["parameters"]["properties"] == {spec.parameter: {"type": "string",
                                                                           "description": spec.argument}}
        assert definition["parameters"]["required"] == [spec.parameter]
    assert function_definition("code")["parameters"]["required"] == ["code"]


def test_the_same_episode_in_both_protocols_gets_the_same_outcome():
    tags = gym.make("coa/SynthHop-v0", **SYNTHHOP)
    tools = gym.make("coa/SynthHop-v0", protocol="tools", **SYNTHHOP)
    for seed in range(3):
        _, info_tags = tags.reset(seed=seed)
        _, info_tools = tools.reset(seed=seed)
        assert info_tools["task_id"] == info_tags["task_id"] and info_tools["protocol"] == "tools"
        assert [t["function"]["name"] for t in info_tools["tool_schemas"]] == ["wiki_search"]
        for action in tags.unwrapped.task.metadata["oracle_actions"]:
            a = tags.step(action)
            b = tools.step(_as_message(action))
            assert a[1:4] == b[1:4]
            same = ("tool", "tool_error_kinds", "error_kind", "answer", "reward_details", "turn")
            assert {k: a[4][k] for k in same} == {k: b[4][k] for k in same}
            if a[0]:  # the observation text is the tag one's body, as a tool message
                (message,) = json.loads(b[0])
                assert message["role"] == "tool" and message["tool_call_id"] == "call_1"
                assert a[0] == f"\n<observation>\n{message['content']}\n</observation>\n\n"
        assert a[1] == 1.0 and a[2]
    tags.close()
    tools.close()


@pytest.mark.parametrize("env_id", ["coa/AIME24-v1", "coa/NQ-v1", "coa/MiniWeb-v0"])
def test_check_env_passes_with_the_tools_protocol(env_id):
    env = gym.make(env_id, protocol="tools")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_malformed_messages_are_corrected_not_raised():
    env = gym.make("coa/AIME24-v1", protocol="tools", max_turns=20)
    env.reset(seed=0)

    def step(action):
        observation, reward, terminated, truncated, info = env.step(action)
        assert not terminated and not truncated and reward == 0.0
        return json.loads(observation), info

    messages, info = step(_call("code", "{not json"))
    assert "not valid JSON" in messages[0]["content"] and info["error_kind"] == "bad_action"
    messages, info = step(_call("code", {"code": 7}))
    assert "as a string" in messages[0]["content"] and info["tool"] == ["code"]
    messages, info = step(_call("code", {"code": "print(1)", "extra": True}))
    assert "unexpected argument" in messages[0]["content"]
    messages, info = step(_call("web_search", {"query": "x"}))
    assert info["error_kind"] == "tool_not_available" and "Available tools: code" in messages[0]["content"]
    messages, info = step({"role": "user", "content": "hi"})
    assert messages[0]["role"] == "user" and info["protocol_error"] == "invalid_text"
    messages, info = step({"role": "assistant", "tool_calls": "code"})
    assert info["protocol_error"] == "invalid_text" and "must be a list" in messages[0]["content"]
    messages, info = step({"role": "assistant", "tool_calls": [{"function": {}}]})
    assert "no function name" in messages[0]["content"]
    messages, info = step({"role": "assistant", "content": "   "})
    assert info["protocol_error"] == "no_action"
    messages, info = step(12345)
    assert info["protocol_error"] == "invalid_text"
    messages, info = step({"role": "assistant", "content": "x" * 70_000})
    assert info["protocol_error"] == "too_long"
    messages, info = step(_call("code", {"code": "print(6 * 7)"}, call_id="abc"))
    assert messages == [{"role": "tool", "tool_call_id": "abc", "name": "code", "content": "42"}]
    # content parts, and a message carried as JSON text, are accepted too
    parts = {"role": "assistant", "content": [{"type": "text", "text": "<answer>\\boxed{7}</answer>"}]}
    assert env.step(json.dumps(parts))[4]["answer"] == "\\boxed{7}"
    env.close()


def test_parallel_calls_when_the_env_allows_them():
    env = gym.make("coa/AIME24-v1", protocol="tools", allow_parallel_tools=True)
    env.reset(seed=0)
    message = {"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "code", "arguments": '{"code": "print(1)"}'}},
        {"id": "b", "type": "function", "function": {"name": "code", "arguments": '{"code": 2}'}}]}
    observation, _, _, _, info = env.step(message)
    first, second = json.loads(observation)
    assert (first["tool_call_id"], first["content"]) == ("a", "1")
    assert second["tool_call_id"] == "b" and "as a string" in second["content"]
    assert info["tool"] == ["code", "code"] and info["tool_error_kinds"] == [None, "bad_action"]
    env.close()


def test_a_plain_answer_without_tags_is_the_whole_reply():
    env = gym.make("coa/AIME24-v1", protocol="tools")
    env.reset(seed=0, options={"task_index": 0})
    gold = env.unwrapped.task.gold[0]
    _, reward, terminated, _, info = env.step({"role": "assistant", "content": f"\\boxed{{{gold}}}"})
    assert terminated and reward == 1.0 and info["answer"] == f"\\boxed{{{gold}}}"
    env.close()


def test_arguments_round_trip_for_any_schema():
    schema = {"name": "add", "parameters": {"type": "object", "required": ["a", "b"],
                                            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}
    query = arguments_to_query(schema, '{"b": 2, "a": 1}')
    assert query_to_arguments(schema, query) == {"a": 1, "b": 2}
    parsed = parse_message(_call("add", {"a": 1}), {"add": schema})
    assert parsed.call_errors == ("Invalid arguments: add: 'b' is a required property.",)


def test_unknown_protocol_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"protocol='xml'.*'tags' or 'tools'"):
        gym.make("coa/AIME24-v1", protocol="xml")

"""Adding a tool is one module plus one registry line: no edit to env.py or protocol.py.

The toy tool below is written to a fresh module and registered with one call; from then on
the protocol parses its tag and stops generation after it, the env describes it in the
system prompt and runs it, and ``coa list --tools`` shows it.
"""

from __future__ import annotations

import json
import textwrap

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import coa_envs  # noqa: F401
from coa_envs.protocol import ProtocolErrorKind, ToolCall, parse_turn, stop_strings
from coa_envs.tools import register_tool, tool_names, unregister_tool

TOY_MODULE = '''
"""A toy tool: the query, reversed."""
from coa_envs.types import ToolResult, ToolSpec

SPEC = ToolSpec(name="reverse", summary="reverse a piece of text.", usage="text",
                argument="the text to reverse")
BACKENDS = ("python", "upper")


class Reverse:
    name = "reverse"

    def __init__(self, backend):
        self.backend = backend

    def run(self, query, ctx):
        text = query[::-1]
        return ToolResult(text.upper() if self.backend == "upper" else text)


def build(backend="python", **config):
    return Reverse(backend)
'''


@pytest.fixture
def toy_tool(tmp_path, monkeypatch):
    (tmp_path / "toy_reverse_tool.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    register_tool("reverse", "toy_reverse_tool")  # the one registry line
    yield "reverse"
    unregister_tool("reverse")


def test_a_registered_tool_parses_is_described_runs_and_is_listed(toy_tool):
    parsed = parse_turn("<think>flip it</think>\n<reverse>stressed</reverse>")
    assert parsed.ok and parsed.tool_calls == (ToolCall("reverse", "stressed"),)
    assert "</reverse>" in stop_strings()
    from trainers.rl.rollout import stop_strings as worker_stop_strings

    assert "</reverse>" in worker_stop_strings()  # RL's workers stop after it too (they used the import-time list)

    env = gym.make("coa/MATH500-v1", tools={"reverse": {"backend": "upper"}})
    try:
        _, info = env.reset(seed=0)
        assert info["tools"] == ["code", "reverse"]
        assert "- <reverse>text</reverse>: reverse a piece of text." in info["messages"][0]["content"]
        observation, _, _, _, info = env.step("<reverse>stressed</reverse>")
        assert observation == "\n<observation>\nDESSERTS\n</observation>\n\n"
        assert info["tool"] == ["reverse"] and info["error_kind"] is None
    finally:
        env.close()

    from coa_cli.main import app

    result = CliRunner().invoke(app, ["list", "--tools", "--json"])
    assert result.exit_code == 0, result.output
    listed = {row["tool"]: row for row in json.loads(result.output)}
    assert listed["reverse"]["backends"] == ["python", "upper"]
    assert listed["reverse"]["description"] == "reverse a piece of text."


def test_a_bad_backend_of_a_registered_tool_names_the_allowed_ones(toy_tool):
    with pytest.raises(ValueError, match=r"tools.reverse.backend='gpu' is not valid; allowed: \['python', 'upper'\]"):
        gym.make("coa/MATH500-v1", tools={"reverse": {"backend": "gpu"}})


def test_unregistering_takes_the_tag_out_of_the_grammar(toy_tool):
    assert "reverse" in tool_names()
    unregister_tool("reverse")
    parsed = parse_turn("<reverse>abc</reverse>")
    assert parsed.error is not None and parsed.error.kind is ProtocolErrorKind.UNKNOWN_TAG
    register_tool("reverse", "toy_reverse_tool")  # the fixture unregisters it again


@pytest.mark.parametrize(("name", "message"), [
    ("think", "is a protocol tag"),
    ("answer", "is a protocol tag"),
    ("Web-Search", "lower-case identifier"),
    ("code", "already registered"),
])
def test_register_tool_refuses_names_that_would_break_the_grammar(name, message):
    with pytest.raises(ValueError, match=message):
        register_tool(name, "somewhere.else")


def test_builtin_tools_cannot_be_unregistered():
    with pytest.raises(ValueError, match="built-in"):
        unregister_tool("code")

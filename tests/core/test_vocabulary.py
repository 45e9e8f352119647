"""The CoA vocabulary is spelled once (coa_envs.vocabulary) and everything else derives from it.

A tool registered with one call must reach every place that speaks the protocol, without an
edit there: the tag grammar, the tiny tokenizer's training text, the MCP server's default
tools and the distillation filters (a tool whose SPEC says it retrieves makes an early answer
a leak). Task families are one explicit list, so a loader's helper module is never a family.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
import yaml

import coa_envs  # noqa: F401
from agents.trajectory import Trajectory
from coa_envs import vocabulary
from coa_envs.tools import register_tool, retrieval_tools, unregister_tool

ROOT = Path(__file__).resolve().parents[2]

LOOKUP_MODULE = '''
"""A toy retrieval tool: looks a word up in a fixed table."""
from coa_envs.types import ToolResult, ToolSpec

SPEC = ToolSpec(name="lookup", summary="look a word up.", usage="word", argument="the word", retrieves=True)
BACKENDS = ("table",)
TABLE = {"capital": "Paris"}


class Lookup:
    name = "lookup"

    def run(self, query, ctx):
        return ToolResult(TABLE.get(query.strip(), "not found"))


def build(backend="table", **config):
    return Lookup()
'''


@pytest.fixture
def lookup_tool(tmp_path, monkeypatch):
    (tmp_path / "toy_lookup_tool.py").write_text(textwrap.dedent(LOOKUP_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    register_tool("lookup", "toy_lookup_tool")
    yield "lookup"
    unregister_tool("lookup")


def test_a_registered_tool_reaches_the_grammar_the_tiny_model_mcp_and_the_filters(lookup_tool):
    from coa_envs.protocol import ToolCall, parse_turn, stop_strings

    assert parse_turn("<lookup>capital</lookup>").tool_calls == (ToolCall("lookup", "capital"),)
    assert "</lookup>" in stop_strings() and "lookup" in vocabulary.coa_tags()

    from agents.tiny import synthetic_coa_texts

    assert any("<lookup>" in text for text in synthetic_coa_texts(50))  # the tokenizer trains on its tag

    from coa_envs.mcp.server import ToolHost, default_tools

    assert "lookup" in default_tools()  # `coa mcp serve` with no --tools serves it
    host = ToolHost({"lookup": {}})
    try:
        assert host.definitions["lookup"]["name"] == "lookup"
        assert host.call("lookup", {"query": "capital"}).text == "Paris"
    finally:
        host.close()

    from trainers.distill.filters import leak_reason

    assert "lookup" in retrieval_tools() and "code" not in retrieval_tools()
    knew = Trajectory(env_id="coa/Toy-v0", task_id="t", prompt_text="What is the capital?", terminated=True,
                      reward=1.0, answer="Paris")
    knew.add_generated("<think>It is Paris.</think>\n<lookup>capital</lookup>")
    knew.add_observation("\n<observation>\nParis\n</observation>\n\n")
    knew.add_generated("<answer>Paris</answer>")
    assert leak_reason(knew, ["Paris"], ["lookup"]) == "leak:before_evidence"
    unregister_tool("lookup")
    assert leak_reason(knew, ["Paris"], ["lookup"]) is None  # an unknown tool looks nothing up
    register_tool("lookup", "toy_lookup_tool")  # the fixture unregisters it again


def test_the_built_in_vocabulary_is_the_protocol_the_tiny_model_and_the_filters_know():
    from agents.tiny import COA_TAGS
    from coa_envs.protocol import RESERVED_TAGS, ROLE_TAGS, TOOL_TAGS

    assert ROLE_TAGS is vocabulary.ROLE_TAGS and RESERVED_TAGS is vocabulary.RESERVED_TAGS
    assert TOOL_TAGS == vocabulary.BUILTIN_TOOLS == vocabulary.tool_names()
    assert set(COA_TAGS) == RESERVED_TAGS | set(TOOL_TAGS)
    assert retrieval_tools() == {"web_search", "crawl_page", "wiki_search"}


def _project_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return {name for name in names if name.split(".")[0] in ("coa_envs", "agents", "trainers", "coa_cli", "sandbox")}


def test_the_vocabulary_and_the_config_toolkit_are_leaves_and_the_protocol_no_longer_needs_the_tools():
    assert not _project_imports(ROOT / "coa_envs" / "vocabulary.py")
    assert not _project_imports(ROOT / "coa_envs" / "configkit.py")
    assert not any(name.startswith("coa_envs.tools") for name in _project_imports(ROOT / "coa_envs" / "protocol.py"))


def test_families_are_one_explicit_list_of_loader_modules():
    import importlib

    from coa_envs.config import EnvConfig
    from coa_envs.tasks import FAMILIES, load_family_tasks

    registry = yaml.safe_load((ROOT / "coa_envs" / "envs_registry.yaml").read_text(encoding="utf-8"))
    registered = {entry["family"] for entry in registry["envs"]}
    assert registered <= set(FAMILIES)
    for family in FAMILIES:
        assert callable(importlib.import_module(f"coa_envs.tasks.{family}").load_tasks)
    for helper in ("split", "web_common", "web_gaia"):
        with pytest.raises(ValueError, match=f"family={helper!r} is not valid"):
            EnvConfig(env_id="coa/Helper-v0", family=helper, reward={"name": "em_f1"})
        with pytest.raises(ValueError, match="is not valid; allowed"):
            load_family_tasks(helper, {})

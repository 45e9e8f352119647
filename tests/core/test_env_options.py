"""Every option that reaches an env -- its settings, each tool's settings, the loader's task
options, each reward term's options -- is checked at ``make`` time by one schema
(:mod:`coa_envs.options`), with a "did you mean" for a near miss of a key, a name or an id.
A mistake used to pass ``make`` and fail every tool call of the run (tool_error_rate 1.0)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from coa_envs.errors import OptionError, UserError
from coa_envs.options import Schema, closest
from tests.env_fixtures import MAKE_KWARGS

GAIA = MAKE_KWARGS["coa/GAIA-v1"]


@pytest.mark.parametrize("env_id, kwargs, fragment", [
    # tool settings: type, range, unknown key (with a suggestion), tool name, backend
    ("coa/SynthHop-v0", {"tools": {"wiki_search": {"top_k": "abc"}}},
     "tools.wiki_search.top_k='abc' is not valid; allowed: a positive integer"),
    ("coa/SynthHop-v0", {"tools": {"wiki_search": {"top_k": -1}}}, "tools.wiki_search.top_k=-1 is not valid"),
    ("coa/SynthHop-v0", {"tools": {"wiki_search": {"topk": 3}}}, "unknown option 'topk' (did you mean 'top_k'?)"),
    ("coa/SynthHop-v0", {"tools": {"wiki_serch": {}}},
     "tools.wiki_serch is not a CoA tool (did you mean 'wiki_search'?)"),
    ("coa/SynthHop-v0", {"tools": {"wiki_search": {"backend": "bm52"}}}, "(did you mean 'bm25'?)"),
    ("coa/SynthHop-v0", {"tools": {"wiki_search": {"backend": "remote", "timeout": 3}}},
     "(did you mean 'timeout_s'?)"),
    ("coa/MATH500-v1", {"tools": {"code": {"cpu_sec": 3}}}, "unknown option 'cpu_sec' (did you mean 'cpu_s'?)"),
    ("coa/MATH500-v1", {"tools": {"code": {"memory_mb": "lots"}}}, "tools.code.memory_mb='lots' is not valid"),
    ("coa/MATH500-v1", {"tools": {"code": {"preset": "nsjail_sed"}}}, "(did you mean 'nsjail_seed'?)"),
    ("coa/GAIA-v1", {**GAIA, "tools": {"crawl_page": {"max_url": 3}}}, "(did you mean 'max_urls'?)"),
    ("coa/GAIA-v1", {**GAIA, "tools": {"web_search": {"top_k": 0}}}, "tools.web_search.top_k=0 is not valid"),
    ("coa/GAIA-v1", {**GAIA, "tools": {"visual_inspector": {"max_token": 5}}}, "(did you mean 'max_tokens'?)"),
    ("coa/GAIA-v1", {**GAIA, "tools": {"web_search": {"cache": {"mode": "replay", "pth": "x"}}}},
     "(did you mean 'path'?)"),
    # settings a constructor checks: the tool is built at make, so they fail make too
    ("coa/GAIA-v1", {**GAIA, "tools": {"web_search": {"backend": "searxng"}}}, "searxng' needs base_url"),
    ("coa/SynthHop-v0", {"tools": {"wiki_search": {"index": "/nonexistent/index"}}}, "index not found"),
    # env settings and task options
    ("coa/SynthHop-v0", {"max_turn": 3}, "unknown option 'max_turn' (did you mean 'max_turns'?)"),
    ("coa/SynthHop-v0", {"prompt": "QA"}, "(did you mean 'qa'?)"),
    ("coa/SynthHop-v0", {"task_options": {"dificulty": "easy"}}, "(did you mean 'difficulty'?)"),
    ("coa/SynthHop-v0", {"task_options": {"num_tasks": 0}}, "task_options.num_tasks=0 is not valid"),
    ("coa/SynthHop-v0", {"task_options": {"split": "tset"}}, "(did you mean 'test'?)"),
    ("coa/MATH500-v1", {"task_options": {"limit": "10"}}, "task_options.limit='10' is not valid"),
    # reward terms: names and options
    ("coa/NQ-v1", {"reward": {"name": "emf1"}}, "(did you mean 'em_f1'?)"),
    ("coa/MATH500-v1", {"reward": {"name": "math_verify", "float_roundng": 3}}, "(did you mean 'float_rounding'?)"),
])
def test_a_bad_option_fails_make_naming_it_with_a_suggestion(env_id, kwargs, fragment):
    with pytest.raises(UserError) as caught:  # the CLI prints it as one message, no traceback
        gym.make(env_id, **kwargs)
    assert fragment in str(caught.value)


def test_good_options_of_every_tool_are_accepted():
    env = gym.make("coa/GAIA-v1", **GAIA, tools={
        "web_search": {"top_k": 3, "timeout_s": 5, "cache": {"mode": "off"}},
        "crawl_page": {"max_urls": 2, "allow_hosts": ["127.0.0.1"], "verify_tls": False},
        "visual_inspector": {"max_tokens": 64}})
    env.close()
    env = gym.make("coa/MATH500-v1", tools={"code": {"cpu_s": 2.5, "memory_mb": 512, "preset": "nsjail_seed"}},
                   task_options={"limit": 5})
    assert len(env.unwrapped.tasks) == 5
    env.close()


@pytest.mark.parametrize("mistyped, meant", [
    ("coa/math500-v0", "coa/MATH500-v1"), ("coa/Math500-v0", "coa/MATH500-v1"), ("coa/synthhop-v0", "coa/SynthHop-v0"),
    ("coa/HotPotQA-v0", "coa/HotpotQA-v1"), ("coa/MATH500-v3", "coa/MATH500-v1"), ("coa/gaia-v0", "coa/GAIA-v1"),
])
def test_a_mistyped_id_gets_a_suggestion_from_gym_make(mistyped, meant):
    with pytest.raises(gym.error.Error) as caught:
        gym.make(mistyped)
    assert meant.split("/")[1].split("-v")[0] in str(caught.value)


def test_registry_check_id_suggests_and_leaves_far_misses_alone():
    from coa_envs.registry import check_id, suggest_id

    assert check_id("coa/NQ-v1") == "coa/NQ-v1"
    with pytest.raises(gym.error.Error, match=r"did you mean 'coa/MATH500-v1'\?"):
        check_id("coa/math500-v0")
    assert suggest_id("coa/Completely-Different-v0") == ""


def test_closest_prefers_the_same_letters_in_another_case():
    assert closest("MAX_TURNS", ["max_turns", "max_tokens"]) == "max_turns"
    assert closest("zzz", ["max_turns"]) is None


def test_a_schema_derived_from_a_signature_checks_types_and_keys():
    def build(top_k: int = 3, name: str | None = None, ratio: float = 0.5, hosts: tuple[str, ...] = ()) -> None:
        """A tool constructor."""

    schema = Schema.of_callable("tools.x", build, minimums={"top_k": 1})
    schema.check({"top_k": 2, "name": None, "ratio": 1, "hosts": ["a", "b"]})
    for bad in ({"top_k": 0}, {"top_k": True}, {"ratio": "x"}, {"hosts": [1]}, {"nme": "a"}):
        with pytest.raises(OptionError):
            schema.check(bad)


def test_wrappers_find_the_turn_limit():
    """``env.get_wrapper_attr("max_turns")`` failed: the limit lived only in ``env.config``."""
    env = gym.make("coa/SynthHop-v0", max_turns=3)
    assert env.get_wrapper_attr("max_turns") == 3 and env.get_wrapper_attr("env_id") == "coa/SynthHop-v0"
    env.close()

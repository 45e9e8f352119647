"""``coa audit-reward``: the degenerate policies played on real envs through the env's own reward."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from coa_cli.main import app
from coa_envs.audit import POLICIES, audit_env

runner = CliRunner()


def test_the_policies_cover_every_kind_the_issue_names():
    kinds = {p.kind for p in POLICIES}
    assert {"early_exit", "constant", "hedge", "copy", "injection", "farming"} <= kinds
    assert len({p.name for p in POLICIES}) == len(POLICIES)


@pytest.mark.parametrize(("env_id", "make_kwargs"), [
    ("coa/AIME24-v1", {}),
    ("coa/NQ-v1", {}),
    # the recipe's env with a sub-string reward: copying the retrieved page used to score 1
    ("coa/SynthHop-v0", {"task_options": {"difficulty": "easy", "split": "train"}, "reward": {"name": "subem"}}),
])
def test_no_degenerate_policy_earns_correctness_on_the_shipped_envs(env_id, make_kwargs):
    report = audit_env(env_id, n_tasks=3, make_kwargs=make_kwargs)
    assert report.results and not report.leaks, [(r.name, r.best_primary) for r in report.leaks]
    assert all(r.unscored == 0 for r in report.results)  # no degenerate answer breaks the reward


def test_code_audit_flags_the_statement_examples_instead_of_failing():
    report = audit_env("coa/LiveCodeBench-v5", n_tasks=2)
    by_name = {r.name: r for r in report.results}
    examples = by_name["code_statement_examples"]
    assert examples.best_primary == 1.0 and examples.public_tests_only == examples.episodes == 2
    assert not report.leaks
    assert all(by_name[name].best_primary == 0.0 for name in by_name if name.startswith("code_") and name !=
               "code_statement_examples")


def test_cli_reports_and_fails_on_a_reward_that_pays_for_nothing(tmp_path):
    out = tmp_path / "audit.json"
    ok = runner.invoke(app, ["audit-reward", "coa/AIME24-v1", "--n", "1", "-p", "constant_zero", "-p",
                             "hedge_boxed_answers", "--json", str(out)])
    assert ok.exit_code == 0, ok.output
    report = json.loads(out.read_text())
    assert [p["name"] for p in report["policies"]] == ["constant_zero", "hedge_boxed_answers"]
    assert report["leaks"] == []
    # a term of one's own that pays one point per turn, whatever the answer
    leaky = runner.invoke(app, ["audit-reward", "coa/AIME24-v1", "--n", "1", "-p", "constant_zero",
                                "-e", "reward.name=tests.rewards.plugin_terms"])
    assert leaky.exit_code == 1 and "constant_zero" in leaky.output
    unknown = runner.invoke(app, ["audit-reward", "coa/AIME24-v1", "-p", "no_such_policy"])
    assert unknown.exit_code == 2 and "no_such_policy" in unknown.output

"""Code rewards a program cannot decide: results compared on the host, one run per test.

What a user relies on: assert-style (LeetCode) tests are rewritten into calls at load and an
assert never runs in the model's process; a call that did not complete fails; results are
plain data; each task says how many of its tests are public (the statement's examples) and
scores on those alone are flagged; LiveCodeBench's private tests load from the official
release files. The degenerate programs themselves are in tests/rewards/test_hacking.py.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401  (registers the ids)
from coa_envs.audit.code_programs import EXIT_PROGRAMS, lookup_program
from coa_envs.rewards._code_run import RECORD_MARK, functional_program, read_record, values_equal
from coa_envs.rewards.code_tests import build
from coa_envs.tasks import TaskDataError
from coa_envs.tasks.code import count_tests, load_tasks, parse_ground_truth
from coa_envs.tasks.code_asserts import AssertRewriteError, rewrite_asserts
from coa_envs.types import Task

ADD = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
FORTY_TWO = Task("t", "add", tests={"kind": "functional", "func_name": "add",
                                    "cases": [{"input": "20\n22", "output": "42", "public": False}]})


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture(scope="module")
def reward():
    return build(cpu_s=2, wall_s=4)


@pytest.fixture(scope="module")
def v5():
    return {t.task_id: t for t in load_tasks(dataset="v5")}


# -- assert-style tests become calls --------------------------------------------------------
@pytest.mark.parametrize("snippet", [
    "result = Solution().add(1, 2)\nassert result == 3, f'Expected 3, but got {repr(result)}'",
    "assert Solution().add(1, 2) == 3",
    "assert 3 == add(1, 2)",
    "r = add(1, 2)\nassert 3 == r",
])
def test_assert_shapes_become_host_compared_calls(snippet):
    assert rewrite_asserts([snippet], "add") == ("add", [{"input": "1\n2", "output": "3"}])


@pytest.mark.parametrize(("snippet", "why"), [
    ("assert abs(Solution().add(1, 2) - 3) < 1e-9", "not `assert <call> == <expected>`"),
    ("assert Solution().add(x, 2) == 3", "is not a literal"),
    ("assert Solution().add(1, 2) == {3}", "no JSON form"),
    ("import os\nassert Solution().add(1, 2) == 3", "neither"),
    ("assert Solution().sub(1, 2) == 3", "the task's function is add"),
    ("assert True", "not `assert <call> == <expected>`"),
])
def test_asserts_that_cannot_be_compared_outside_the_program_are_refused(snippet, why):
    with pytest.raises(AssertRewriteError, match=why):
        rewrite_asserts([snippet], "add")
    with pytest.raises(TaskDataError, match="cannot be compared outside the program"):
        parse_ground_truth({"ground_truth": json.dumps({"functional": snippet})}, "f.parquet", 3, "add")


def test_shipped_leetcode_tasks_carry_calls_not_asserts(v5):
    task = v5["3610"]
    assert task.tests["kind"] == "functional" and task.tests["func_name"] == "findXSum"
    assert "assert" not in json.dumps(task.tests)
    expected = task.tests["cases"][0]["output"]
    assert json.loads(expected) == [11, 15, 15, 15, 12]


# -- the result channel --------------------------------------------------------------------
def test_expected_values_never_enter_the_program():
    program = functional_program(ADD, "add")
    assert "42" not in program and "add" in program
    # the driver takes its references before the solution runs, and the solution's prints go to stderr
    assert program.index("_coa_os.dup2(2, 1)") < program.index(ADD)


@pytest.mark.parametrize(("stdout", "value", "problem"), [
    (f"{RECORD_MARK}[1, 2]\n", [1, 2], None),
    ("", None, "no_result"),
    ("3\n", None, "no_result"),  # a print is not a record
    (f"{RECORD_MARK}3\n{RECORD_MARK}3\n", None, "bad_result"),  # a forged record beside the real one
    (f"noise\n{RECORD_MARK}3\n", None, "bad_result"),
    (f"{RECORD_MARK}not json\n", None, "bad_result"),
    (f"{RECORD_MARK}" + "[" * 100_000 + "\n", None, "bad_result"),  # deeper than the parser goes
])
def test_result_records_are_read_strictly(stdout, value, problem):
    assert read_record(stdout) == (value, problem)


def test_values_compare_as_plain_data_like_the_official_grader():
    assert values_equal([1, 2], "[1, 2]") and values_equal((1, 2), "[1, 2]") and values_equal(1.0, "1")
    assert not values_equal("1", "1")  # the string "1" is not the number 1
    assert not values_equal(float("nan"), "NaN") and not values_equal([1], "[1, 2]")


def test_a_correct_solution_passes_every_call_in_its_own_run(reward):
    task = Task("t", "add", tests={"kind": "functional", "func_name": "add", "cases": [
        {"input": "1\n2", "output": "3", "public": True}, {"input": "40\n2", "output": "42", "public": False}]})
    good = reward(fenced(ADD + "print('debugging output is fine')"), task)
    assert good.score == 1.0 and good.details["passed"] == 2, good.details
    assert good.details["public_tests"] == 1 and good.details["private_tests"] == 1
    assert good.details["public_tests_only"] is False
    wrong = reward(fenced(ADD.replace("a + b", "a * b")), task)
    assert wrong.score == 0.0 and [t["reason"] for t in wrong.details["tests"]] == ["wrong_answer"] * 2


@pytest.mark.parametrize("name", sorted(EXIT_PROGRAMS))
def test_programs_that_end_or_lie_before_the_check_fail_every_test(reward, name):
    result = reward(fenced(EXIT_PROGRAMS[name][1]), FORTY_TWO)
    assert result.score == 0.0, (name, result.details)
    assert all(t["reason"] for t in result.details["tests"] if not t["passed"])
    stdin_task = Task("s", "add", tests={"kind": "stdin", "cases": [{"input": "20 22\n", "output": "42\n"}]})
    assert reward(fenced(EXIT_PROGRAMS[name][1]), stdin_task).score == 0.0


def test_a_forged_record_is_only_a_guess(reward):
    # Forging the channel gives a value of the program's choosing: right only when guessed
    # (the expected value is not in the sandbox to be copied).
    forged = EXIT_PROGRAMS["forged_result"][1]
    assert reward(fenced(forged), FORTY_TWO).score == 0.0
    assert reward(fenced(forged.replace("0\\n", "42\\n")), FORTY_TWO).score == 1.0  # a lucky guess


def test_malformed_tests_are_a_reward_error_not_a_score(reward):
    with pytest.raises(ValueError, match="func_name"):
        reward(fenced(ADD), Task("t", "q", tests={"kind": "functional", "cases": [{"input": "1", "output": "1"}]}))


# -- public and private tests ----------------------------------------------------------------
def test_shipped_tests_are_the_statements_examples_and_say_so(v5):
    counts = [count_tests(t.tests) for t in v5.values()]
    assert all(c["private"] == 0 and c["public"] == c["total"] >= 1 for c in counts)
    env = gym.make("coa/LiveCodeBench-v5")
    try:
        _, info = env.reset(options={"task_id": "abc374_a"})
        total = len(v5["abc374_a"].tests["cases"])
        assert info["tests"] == {"total": total, "public": total, "private": 0}
    finally:
        env.close()


def test_a_lookup_table_of_the_examples_passes_them_and_is_flagged(reward, v5):
    task = v5["abc374_c"]
    result = reward(fenced(lookup_program(task.question)), task)
    assert result.score == 1.0 and result.details["public_tests_only"] is True


def _official_row(question_id: str, public: list[dict], private: list[dict], content: str, **extra) -> dict:
    packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode()
    return {"question_title": "t", "question_content": content, "platform": "atcoder", "question_id": question_id,
            "contest_id": "c", "contest_date": "2024-10-05T00:00:00", "difficulty": "easy",
            "public_test_cases": json.dumps(public), "private_test_cases": packed, "metadata": "{}", **extra}


def test_private_tests_from_the_release_files_defeat_the_lookup_table(tmp_path, reward, v5):
    shipped = v5["abc374_c"]
    public = [{"input": c["input"], "output": c["output"], "testtype": "stdin"} for c in shipped.tests["cases"]]
    private = [{"input": "4\n1 1 1 1\n", "output": "2\n", "testtype": "stdin"}]
    row = _official_row("abc374_c", public, private, shipped.question)
    (tmp_path / "test.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(str(tmp_path / "test.jsonl"))
    assert count_tests(task.tests) == {"total": len(public) + 1, "public": len(public), "private": 1}
    result = reward(fenced(lookup_program(task.question)), task)
    assert result.score == 0.0 and result.details["public_tests_only"] is False
    assert [t["passed"] for t in result.details["tests"]] == [True] * len(public) + [False]


def test_subset_shipped_takes_the_shipped_problems_from_a_folder_of_release_files(tmp_path, v5):
    rows = [_official_row(i, [{"input": "1\n", "output": "1\n", "testtype": "stdin"}],
                          [{"input": "2\n", "output": "2\n", "testtype": "stdin"}], "echo") for i in v5]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:100]))
    (tmp_path / "test2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[100:])
                                          + json.dumps(_official_row("extra", [], [{"input": "1", "output": "1",
                                                                                    "testtype": "stdin"}], "x")))
    tasks = load_tasks(str(tmp_path), dataset="v5", subset="shipped")
    assert [t.task_id for t in tasks] == list(v5) and all(count_tests(t.tests)["private"] == 1 for t in tasks)
    with pytest.raises(ValueError, match="subset=shipped: 67 of the 167"):
        load_tasks(str(tmp_path / "test.jsonl"), dataset="v5", subset="shipped")
    assert len(load_tasks(str(tmp_path), dataset="v5")) == 168  # the whole folder, as a pool


def test_coa_eval_flags_scores_on_public_tests_only(tmp_path):
    from typer.testing import CliRunner

    from coa_cli.main import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "coa/LiveCodeBench-v5", "--agent",
                                      "tests.rewards.lookup_agent:statement_examples", "--n", "2", "--out", str(out),
                                      "--no-plots", "--no-progress", "--concurrency", "1"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"] == 1.0 and summary["public_tests_only"] == 2  # a lookup table "solves" them
    assert "public tests only" in result.output and "private tests" in result.output


def test_tasks_whose_every_test_expects_nothing_are_refused(tmp_path):
    from coa_envs.tasks.hygiene import REPORTS

    silent = _official_row("s1", [{"input": "1\n", "output": "\n", "testtype": "stdin"}], [], "print nothing")
    real = _official_row("s2", [{"input": "1\n", "output": "\n", "testtype": "stdin"}],
                         [{"input": "2\n", "output": "2\n", "testtype": "stdin"}], "echo unless 1")
    (tmp_path / "test.jsonl").write_text(json.dumps(silent) + "\n" + json.dumps(real) + "\n")
    assert [t.task_id for t in load_tasks(str(tmp_path / "test.jsonl"))] == ["s2"]  # a silent program passes s1
    assert any(r.dropped_tasks == ("s1",) for r in REPORTS.values())

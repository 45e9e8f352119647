"""The code family end to end: LiveCodeBench loading and the all-tests-pass reward.

No reference solutions ship with the data, so these tests carry their own correct and
wrong programs for a few problems (stdin- and function-style) and check reward 1 / 0.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from coa_envs.rewards.code_tests import build, extract_code, outputs_match
from coa_envs.tasks import TaskDataError
from coa_envs.tasks.code import load_tasks, parse_ground_truth
from coa_envs.types import Task


@pytest.fixture(scope="module")
def v5():
    return {t.task_id: t for t in load_tasks(dataset="v5")}


@pytest.fixture(scope="module")
def v4():
    return {t.task_id: t for t in load_tasks(dataset="v4")}


@pytest.fixture(scope="module")
def reward():
    return build(cpu_s=4, wall_s=8)


def fenced(code: str) -> str:
    return f"<think>done</think>\n```python\n{code}\n```"


SAN_RIGHT = "s = input().strip()\nprint('Yes' if s.endswith('san') else 'No')"
SAN_WRONG = "input()\nprint('Yes')"
LUNCH_RIGHT = """
n = int(input())
k = list(map(int, input().split()))
total = sum(k)
best = total
for mask in range(1 << n):
    a = sum(k[i] for i in range(n) if mask >> i & 1)
    best = min(best, max(a, total - a))
print(best)
"""
LUNCH_WRONG = """
n = int(input())
k = sorted(map(int, input().split()), reverse=True)
a = b = 0
for x in k:
    if a <= b:
        a += x
    else:
        b += x
print(max(a, b) + 1)
"""
KCONSTRAINT_RIGHT = """
class Solution:
    def countKConstraintSubstrings(self, s: str, k: int) -> int:
        count = 0
        for i in range(len(s)):
            for j in range(i + 1, len(s) + 1):
                part = s[i:j]
                if part.count('0') <= k or part.count('1') <= k:
                    count += 1
        return count
"""
KCONSTRAINT_WRONG = KCONSTRAINT_RIGHT.replace("or part.count", "and part.count")
XSUM_RIGHT = """
class Solution:
    def findXSum(self, nums: List[int], k: int, x: int) -> List[int]:
        out = []
        for i in range(len(nums) - k + 1):
            window = nums[i:i + k]
            counts = Counter(window)
            top = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:x]
            out.append(sum(value * times for value, times in top))
        return out
"""
XSUM_WRONG = XSUM_RIGHT.replace("[:x]", "[: x - 1]")  # off by one: drops an element


@pytest.mark.parametrize(
    ("dataset", "task_id", "right", "wrong"),
    [
        ("v5", "abc374_a", SAN_RIGHT, SAN_WRONG),
        ("v5", "abc374_c", LUNCH_RIGHT, LUNCH_WRONG),
        ("v4", "3543", KCONSTRAINT_RIGHT, KCONSTRAINT_WRONG),
        ("v5", "3610", XSUM_RIGHT, XSUM_WRONG),
    ],
    ids=["stdin-san", "stdin-lunch", "assert-kconstraint", "assert-xsum"],
)
def test_reference_solutions_score_one_and_wrong_ones_zero(reward, v4, v5, dataset, task_id, right, wrong):
    task = (v5 if dataset == "v5" else v4)[task_id]
    good = reward(fenced(right), task)
    assert good.score == 1.0, good.details
    assert good.details["passed"] == good.details["total"] >= 1
    bad = reward(fenced(wrong), task)
    assert bad.score == 0.0
    assert any(t["reason"] == "wrong_answer" for t in bad.details["tests"] if not t["passed"]) or any(
        "AssertionError" in t.get("stderr", "") for t in bad.details["tests"]
    )


def test_per_test_status_reports_timeouts_and_crashes(v5):
    task = v5["abc374_a"]
    slow = build(cpu_s=1, wall_s=2)(fenced("while True:\n    pass"), task)
    assert slow.score == 0.0
    assert {t["reason"] for t in slow.details["tests"]} == {"time_limit"}
    crash = build()(fenced("raise ValueError('boom')"), task)
    assert {t["reason"] for t in crash.details["tests"]} == {"runtime_error"}
    assert "ValueError: boom" in crash.details["tests"][0]["stderr"]


def test_answer_without_code_scores_zero(v5):
    result = build()("", v5["abc374_a"])
    assert result.score == 0.0 and result.details["code_found"] is False


def test_code_extraction_prefers_the_last_python_block():
    answer = "```text\nnot code\n```\nfirst:\n```py\nprint(1)\n```\nfinal:\n```python\nprint(2)\n```"
    assert extract_code(answer) == "print(2)"
    assert extract_code("print(3)") == "print(3)"
    assert extract_code("```\nprint(4)\n```") == "print(4)"


def test_output_comparison_normalises_whitespace_per_line():
    assert outputs_match("1  2 \n3\n\n", "1 2\n3")
    assert outputs_match("1.50\n", "1.5\n")  # numeric tokens compared as decimals
    assert not outputs_match("1 2\n", "12\n")
    assert not outputs_match("Yes\n", "yes\n")


def test_ground_truth_json_string_inside_dict_and_dict_as_string():
    truth = json.dumps({"stdin": ["1\n"], "expected_output": ["2\n"]})
    as_dict = parse_ground_truth({"ground_truth": truth, "style": "rule"})
    as_text = parse_ground_truth(json.dumps({"ground_truth": truth}))
    assert as_dict == as_text == {"kind": "stdin", "cases": [{"input": "1\n", "output": "2\n", "public": True}]}
    snippet = "result = Solution().f([1, 2], 'a')\nassert result == (3, None), 'x'"
    functional = parse_ground_truth({"ground_truth": json.dumps({"functional": snippet})}, func_name="f")
    assert functional == {"kind": "functional", "func_name": "f",
                          "cases": [{"input": '[1, 2]\n"a"', "output": "[3, null]", "public": True}]}


@pytest.mark.parametrize(
    ("reward_model", "field"),
    [
        ({"style": "rule"}, "ground_truth"),
        ({"ground_truth": json.dumps({"stdin": ["1"]})}, "expected_output"),
        ({"ground_truth": "{not json"}, "ground_truth"),
        ({"ground_truth": json.dumps({"stdin": ["1"], "expected_output": []})}, "reward_model.ground_truth"),
    ],
)
def test_missing_or_broken_ground_truth_names_the_field(reward_model, field):
    with pytest.raises(TaskDataError) as error:
        parse_ground_truth(reward_model, "lcb.parquet", 7)
    assert error.value.field == field and error.value.row == 7


def _official_row(question_id: str, tests: list[dict], private: list[dict], **extra) -> dict:
    packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode()
    row = {
        "question_title": "t",
        "question_content": "Add the numbers.",
        "platform": "leetcode",
        "question_id": question_id,
        "contest_id": "c",
        "contest_date": "2024-01-01T00:00:00",
        "difficulty": "easy",
        "public_test_cases": json.dumps(tests),
        "private_test_cases": packed,
    }
    row.update(extra)
    return row


def test_official_jsonl_functional_and_stdin_tasks(tmp_path, reward):
    functional = [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]
    rows = [
        _official_row(
            "f1",
            functional,
            [{"input": "[]\n0", "output": "0", "testtype": "functional"}],
            starter_code="class Solution:\n    def total(self, nums: List[int], extra: int) -> int:\n",
            metadata=json.dumps({"func_name": "total"}),
        ),
        _official_row("s1", [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}], [], platform="atcoder"),
    ]
    path = tmp_path / "test.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tasks = {t.task_id: t for t in load_tasks(str(path))}
    assert tasks["f1"].tests["kind"] == "functional" and len(tasks["f1"].tests["cases"]) == 2
    assert "starter code" in tasks["f1"].question
    right = (
        "class Solution:\n    def total(self, nums: List[int], extra: int) -> int:\n        return sum(nums) + extra"
    )
    assert reward(fenced(right), tasks["f1"]).score == 1.0
    assert reward(fenced(right.replace("+ extra", "- extra")), tasks["f1"]).score == 0.0
    assert reward(fenced("a, b = map(int, input().split())\nprint(a + b)"), tasks["s1"]).score == 1.0
    assert reward(fenced("print(5 + 1)"), tasks["s1"]).score == 0.0


def test_official_jsonl_refuses_pickled_objects(tmp_path):
    evil = base64.b64encode(zlib.compress(pickle.dumps(Task("x", "y")))).decode()
    row = _official_row("e1", [{"input": "1", "output": "1", "testtype": "stdin"}], [])
    row["private_test_cases"] = evil
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TaskDataError) as error:
        load_tasks(str(path))
    assert error.value.field == "private_test_cases"


def test_shipped_datasets_load_with_both_test_kinds(v4, v5):
    assert len(v4) == 100 and len(v5) == 167
    kinds = {t.tests["kind"] for t in v5.values()}
    assert kinds == {"stdin", "functional"}  # the verl files' asserts, rewritten into calls
    assert not v5["abc374_a"].question.startswith("You are an expert")  # seed instructions dropped
    assert v5["3610"].metadata["func_name"] == "findXSum"


def test_fixture_oracle_solutions_use_the_code_tool_and_score_one():
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers the ids)

    fixture = Path(__file__).parent / "fixtures" / "livecodebench_oracle.jsonl"
    env = gym.make("coa/LiveCodeBench-v5", data_path=str(fixture))
    try:
        for task in load_tasks(str(fixture)):
            env.reset(options={"task_id": task.task_id})
            probe, answer = task.metadata["oracle_actions"]
            observation, reward, terminated, _, info = env.step(probe)
            assert not terminated and info["error_kind"] is None, observation
            _, reward, terminated, _, info = env.step(answer)
            assert terminated and reward == 1.0, (task.task_id, info["reward_details"])
    finally:
        env.close()


def _stdin_task(cases: int) -> Task:
    tests = {"kind": "stdin", "cases": [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(cases)]}
    return Task("par", "echo", tests=tests)


def test_tests_of_one_answer_run_in_parallel():
    # A barrier only opens when all the answer's tests are in the sandbox at the same time:
    # run one after another, the first would wait alone and break it.
    import threading

    from sandbox import ExecResult, Status

    barrier = threading.Barrier(4, timeout=20)
    seen: list[str] = []

    def runner(code, stdin, limits):
        barrier.wait()
        seen.append(stdin)
        return ExecResult(stdin, "", 0, Status.OK, 0.01, 0.0)

    reward = build(max_parallel=4)
    reward._runner = runner
    result = reward(fenced("print(input())"), _stdin_task(4))
    assert result.score == 1.0, result.details
    assert sorted(seen) == [f"{i}\n" for i in range(4)]
    assert [t["index"] for t in result.details["tests"]] == [0, 1, 2, 3]


def test_broken_sandbox_fails_the_test_instead_of_raising():
    def runner(code, stdin, limits):
        raise RuntimeError("sandbox pool is closed")

    reward = build()
    reward._runner = runner
    result = reward(fenced("print(input())"), _stdin_task(2))
    assert result.score == 0.0
    assert {t["reason"] for t in result.details["tests"]} == {"sandbox_error"}
    assert "pool is closed" in result.details["tests"][0]["stderr"]


def test_each_test_gets_its_own_verdict_in_the_real_sandbox():
    # Passes on even inputs, fails (wrongly, crashing, slowly) on the others.
    code = (
        "n = int(input())\n"
        "if n == 1:\n    print(99)\n"
        "elif n == 3:\n    raise KeyError(n)\n"
        "elif n == 5:\n    while True: pass\n"
        "else:\n    print(n)"
    )
    result = build(cpu_s=1, wall_s=3)(fenced(code), _stdin_task(6))
    verdicts = result.details["tests"]
    assert result.score == 0.0 and result.details["passed"] == 3 and result.details["total"] == 6
    assert [t["passed"] for t in verdicts] == [True, False, True, False, True, False]
    assert [t.get("reason") for t in verdicts[1::2]] == ["wrong_answer", "runtime_error", "time_limit"]
    assert [t["status"] for t in verdicts] == ["ok", "ok", "ok", "error", "ok", "timeout"]


def test_env_info_carries_the_per_test_verdicts():
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers the ids)

    fixture = Path(__file__).parent / "fixtures" / "livecodebench_oracle.jsonl"
    env = gym.make("coa/LiveCodeBench-v5", data_path=str(fixture))
    try:
        env.reset(options={"task_id": "abc374_a"})
        _, reward, terminated, _, info = env.step("<answer>\n```python\nprint('Yes')\n```\n</answer>")
        assert terminated and reward == 0.0
        tests = info["reward_details"]["tests"]
        assert [(t["status"], t["passed"]) for t in tests] == [("ok", True), ("ok", False)]
        assert tests[1]["reason"] == "wrong_answer"
    finally:
        env.close()


def test_official_jsonl_with_already_decoded_test_lists(tmp_path, reward):
    # Records exported by `datasets` may hold the test list itself rather than its JSON text.
    row = _official_row("s2", [], [])
    row["public_test_cases"] = [{"input": "4\n", "output": "16\n", "testtype": "stdin"}]
    row["private_test_cases"] = ""
    path = tmp_path / "decoded.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(str(path), platform="leetcode")
    assert task.tests == {"kind": "stdin", "cases": [{"input": "4\n", "output": "16\n", "public": True}]}
    assert reward(fenced("print(int(input()) ** 2)"), task).score == 1.0


def test_official_jsonl_missing_field_names_row_and_field(tmp_path):
    row = _official_row("m1", [{"input": "1", "output": "1", "testtype": "stdin"}], [])
    del row["question_content"]
    path = tmp_path / "missing.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TaskDataError) as error:
        load_tasks(str(path))
    assert (error.value.row, error.value.field) == (1, "question_content")


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["v4", "v5"])
def test_every_shipped_task_is_graded_without_a_reward_error(dataset):
    # A placeholder program against every task: each test gets a verdict, none crashes the reward.
    reward = build(cpu_s=2, wall_s=4)
    for task in load_tasks(dataset=dataset):
        result = reward(fenced("print(1)"), task)
        assert result.score in (0.0, 1.0) and "error" not in result.details, task.task_id
        assert result.details["total"] == len(result.details["tests"]) >= 1
        assert all(t["reason"] != "sandbox_error" for t in result.details["tests"] if not t["passed"])

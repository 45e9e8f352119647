"""Best-of-K with an LLM judge as the selector, served by ``coa serve`` on 127.0.0.1."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")

from agents.metrics import best_of_k, group_by_task, majority_vote
from agents.selectors import JudgeSelector
from agents.trajectory import Trajectory


def _samples(task: str, answers: list[str], correct: set[int]) -> list[Trajectory]:
    question = [{"role": "system", "content": "s"}, {"role": "user", "content": f"Question {task}?"}]
    return [Trajectory(env_id="e", task_id=task, sample_index=i, answer=a, prompt_messages=question,
                       reward=1.0 if i in correct else 0.0) for i, a in enumerate(answers)]


def test_judge_picks_the_answer_the_majority_missed(tiny_tokenizer, scripted_lm):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    # task a: the right answer ("Lyon", sample 2) is outvoted; the judge model replies "2".
    rows = _samples("a", ["Paris", "Lyon", "paris"], {1})
    groups = group_by_task(rows)
    assert best_of_k(groups, 3, majority_vote) == 0.0
    engine = HFEngine(scripted_lm(["2<|im_end|>"]), tiny_tokenizer)
    with serve_in_thread(create_app(engine, tiny_tokenizer, "judge")) as url:
        judge = JudgeSelector(url, "judge")
        assert best_of_k(groups, 3, judge) == 1.0
        assert judge.calls == 1 and judge.fallbacks == 0
        judge.close()


def test_judge_prompt_shows_question_and_numbered_candidates(monkeypatch):
    judge = JudgeSelector("http://127.0.0.1:9/v1", "m")
    seen = []
    monkeypatch.setattr(judge, "_ask", lambda prompt: seen.append(prompt) or "Candidate 3 is right.")
    assert judge("a", _samples("a", ["x", "", "z"], {2})) == 2
    assert "Question a?" in seen[0] and "1. x\n2. (no answer)\n3. z" in seen[0]


def test_unreachable_or_confused_judge_falls_back_to_the_majority(monkeypatch):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rows = _samples("b", ["42", "41", "42"], {0, 2})
    judge = JudgeSelector(f"http://127.0.0.1:{port}/v1", "m", timeout_s=5)
    assert judge("b", rows) == 0 and judge.fallbacks == 1
    monkeypatch.setattr(judge, "_ask", lambda prompt: "I cannot decide (7)")  # out of range
    assert judge("b", rows) == 0 and judge.fallbacks == 2
    with pytest.raises(ValueError):
        monkeypatch.delenv("COA_JUDGE_BASE_URL", raising=False)
        JudgeSelector(None, "m")

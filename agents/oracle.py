"""The oracle agent: solves a task from its gold data, in correct CoA format.

It exists to validate data and rewards (an oracle below 1.0 is a data or reward bug) and to
produce tool-using demonstration trajectories. When a task carries
``metadata["oracle_actions"]`` (a scripted solution that calls the real tools), the oracle
plays them; otherwise it answers at once with the first gold answer.
"""

from __future__ import annotations

from typing import Any

from coa_envs.types import Task

__all__ = ["OracleAgent", "oracle_answer_text"]


def oracle_answer_text(task: Task, family: str | None = None) -> str:
    gold = task.gold[0] if task.gold else ""
    if family == "math" or task.metadata.get("answer_format") == "boxed":
        gold = f"\\boxed{{{gold}}}"
    return f"<think>\nThe answer follows from the task's data.\n</think>\n<answer>{gold}</answer>"


class OracleAgent:
    """Needs the env's current task: pass ``env.unwrapped`` (tasks are never shown to models)."""

    def __init__(self, env: Any):
        self.env = env.unwrapped
        self._script: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        task: Task = self.env.task
        scripted = task.metadata.get("oracle_actions")
        if not scripted and not task.gold:  # answering "" would score 0 and look like a result
            raise ValueError(f"the oracle needs the gold answer of task {task.task_id} and this env gives none "
                             "(a coa serve-env server shows them only with --expose-answers)")
        if scripted:
            self._script = list(scripted)
        else:
            self._script = [oracle_answer_text(task, self.env.config.family)]

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self._script:
            return "<answer>no further oracle actions</answer>"
        return self._script.pop(0)

"""An agent for the tests: answers a code task with a lookup table of its statement's examples."""

from __future__ import annotations

from typing import Any

from coa_envs.audit.code_programs import lookup_program


def statement_examples(observation: str, info: dict[str, Any]) -> str:
    return f"<think>look up the examples</think>\n<answer>```python\n{lookup_program(observation)}\n```</answer>"

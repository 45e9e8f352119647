"""Write distilled trajectories in the seed's SFT format: ShareGPT-style records.

The seed trained with LLaMA-Factory on ShareGPT records: a ``system`` prompt and
``conversations`` of ``{"from": "human"|"gpt", "value": …}``, where the one ``gpt`` turn holds
the whole CoA trajectory as text with the env's ``<observation>…</observation>`` spans inline
(its ``ignore_observation`` option masks them). :func:`trainers.data.load_samples` reads these
records back, splitting the observations off as untrained spans, so the same file trains with
our SFT trainer or with LLaMA-Factory.
"""

from __future__ import annotations

from typing import Any

__all__ = ["to_sharegpt"]

_FROM = {"user": "human", "assistant": "gpt", "tool": "observation"}


def to_sharegpt(trajectory: Any) -> dict[str, Any]:
    """One ShareGPT record: the prompt's system message, its other turns, then the trajectory."""
    system = "\n\n".join(m["content"] for m in trajectory.prompt_messages if m.get("role") == "system")
    conversations = [{"from": _FROM.get(m.get("role", "user"), "human"), "value": m.get("content", "")}
                     for m in trajectory.prompt_messages if m.get("role") != "system"]
    if not conversations:  # a raw-text prompt (no chat messages)
        conversations = [{"from": "human", "value": trajectory.prompt_text}]
    conversations.append({"from": "gpt", "value": trajectory.response_text})
    record: dict[str, Any] = {"id": f"{trajectory.env_id}/{trajectory.task_id}/{trajectory.sample_index}"}
    if system:
        record["system"] = system
    record["conversations"] = conversations
    record["env_id"], record["task_id"], record["reward"] = trajectory.env_id, trajectory.task_id, trajectory.reward
    return record

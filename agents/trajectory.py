"""The one record that flows everywhere: eval writes it, SFT reads it, RL builds it.

A trajectory is a prompt followed by alternating *segments*: text the model generated
(loss on) and observation text the environment appended (loss off). When a policy that
samples tokens produced it, each segment also keeps the token ids exactly as sampled or
appended, so trainers never re-tokenise the concatenated text (re-tokenising moves token
boundaries at tag joins, which silently shifts the loss mask). Text-only agents (oracle,
replay, HTTP endpoints without token ids) leave the id lists empty; trainers then tokenise
segment by segment, which keeps the mask exact at every segment boundary.

Stdlib only: imported by the CLI and by trainers alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["Segment", "Trajectory", "read_trajectories", "write_trajectory"]

SegmentKind = Literal["generated", "observation"]


@dataclass(slots=True)
class Segment:
    """One contiguous span: what the model generated in a turn, or one observation."""

    kind: SegmentKind
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    @property
    def trainable(self) -> bool:
        return self.kind == "generated"


@dataclass(slots=True)
class Trajectory:
    """A whole episode. ``prompt_messages`` are the chat messages before the first turn."""

    env_id: str
    task_id: str
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    prompt_text: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    answer: str | None = None
    status: str = "ok"
    seed: int | None = None
    sample_index: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    # -- building -------------------------------------------------------------------
    def add_generated(
        self, text: str, token_ids: Iterable[int] = (), logprobs: Iterable[float] = ()
    ) -> None:
        self.segments.append(Segment("generated", text, list(token_ids), list(logprobs)))

    def add_observation(self, text: str, token_ids: Iterable[int] = ()) -> None:
        self.segments.append(Segment("observation", text, list(token_ids)))

    # -- derived views ---------------------------------------------------------------
    @property
    def has_token_ids(self) -> bool:
        return bool(self.prompt_ids) and all(s.token_ids or not s.text for s in self.segments)

    @property
    def response_text(self) -> str:
        """Everything after the prompt, exactly as the model saw it."""
        return "".join(s.text for s in self.segments)

    @property
    def num_turns(self) -> int:
        return sum(1 for s in self.segments if s.kind == "generated")

    def response_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    def loss_mask(self) -> list[int]:
        """1 for every generated token, 0 for observation tokens (response part only)."""
        return [int(s.trainable) for s in self.segments for _ in s.token_ids]

    def input_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.response_ids()]

    def full_loss_mask(self) -> list[int]:
        """Mask aligned with :meth:`input_ids`: prompt tokens are never trained on."""
        return [0] * len(self.prompt_ids) + self.loss_mask()

    def sampled_logprobs(self) -> list[float]:
        """Rollout-engine logprobs aligned with :meth:`response_ids` (0.0 on observations)."""
        out: list[float] = []
        for seg in self.segments:
            if seg.trainable and len(seg.logprobs) == len(seg.token_ids):
                out.extend(seg.logprobs)
            else:
                out.extend([0.0] * len(seg.token_ids))
        return out

    # -- serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        segments = [Segment(**s) for s in data.pop("segments", [])]
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown trajectory fields: {sorted(unknown)}")
        return cls(segments=segments, **data)


def write_trajectory(handle: Any, trajectory: Trajectory) -> None:
    """Append one trajectory as a JSONL line and flush, so a crash loses nothing written."""
    handle.write(trajectory.to_json() + "\n")
    handle.flush()


def read_trajectories(path: str | Path) -> Iterator[Trajectory]:
    """Yield trajectories from a JSONL file; a torn last line (crash mid-write) is skipped."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield Trajectory.from_dict(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                return
            raise ValueError(f"{path}:{number}: not a JSON trajectory line") from None

"""The one record that flows everywhere: eval writes it, SFT reads it, RL builds it.

A trajectory is a prompt followed by alternating *segments*: text the model generated
(loss on) and observation text the environment appended (loss off). When a policy that
samples tokens produced it, each segment also keeps the token ids exactly as sampled or
appended, so trainers never re-tokenise the concatenated text (re-tokenising moves token
boundaries at tag joins, which silently shifts the loss mask). Text-only agents (oracle,
replay, HTTP endpoints without token ids) leave the id lists empty; trainers then tokenise
segment by segment, which keeps the mask exact at every segment boundary.

How an episode ended is one :class:`EpisodeStatus`, the same vocabulary whichever loop ran
it (``agents.episode.run_episode``, the concurrent runner, the RL rollout worker); files
written before it existed are read with their old status strings mapped onto it.

Stdlib only: imported by the CLI and by trainers alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

__all__ = ["EpisodeStatus", "Segment", "Trajectory", "read_trajectories", "run_trajectory_file",
           "write_trajectory"]

SegmentKind = Literal["generated", "observation"]


class EpisodeStatus(StrEnum):
    """How an episode ended: ``ok``, ``truncated:<reason>`` or ``error:<reason>``.

    The prefix is the outcome class that metrics count (:attr:`outcome`): ``ok`` means the
    model answered and the reward was scored (a shaping term that raised leaves its share 0
    and ``info["reward_error"]``); ``truncated`` means the episode was cut short by a limit and
    scores 0; ``error`` means something other than the model's answer ended it, or (``error:reward``)
    the answer got no verdict: the primary reward term raised (a judge that is down or answers
    garbage), so the episode is left out of accuracy and of the RL loss, and counted, never
    scored 0 as if it were wrong. Values are stable keys in trajectories.jsonl,
    summary.json and the RL ``errors/<reason>`` metrics.
    """

    OK = "ok"
    # -- truncated: a limit ended the episode before an answer ----------------------------
    TRUNCATED_MAX_TURNS = "truncated:max_turns"  # the env's turn limit
    TRUNCATED_CONTEXT_BUDGET = "truncated:context_budget"  # the env's character/token budget
    TRUNCATED_UNKNOWN = "truncated:unknown"  # the env truncated without saying why
    TRUNCATED_MAX_TOOL_CALLS = "truncated:max_tool_calls"  # the runner's tool-call cap
    TRUNCATED_MAX_NEW_TOKENS = "truncated:max_new_tokens"  # a turn hit the generation limit unclosed
    TRUNCATED_RESPONSE_TOKENS = "truncated:response_tokens"  # RL: the response token budget is spent
    # -- error: the episode could not go on -------------------------------------------------
    ERROR_EMPTY_OUTPUT = "error:empty_output"  # the model produced no text
    ERROR_AGENT = "error:agent"  # the agent (or an agent framework) raised
    ERROR_ENV = "error:env"  # reset or step raised (envs should not; a broken task does)
    ERROR_TIMEOUT = "error:timeout"  # the episode ran past its deadline
    ERROR_REWARD = "error:reward"  # the answer got no verdict (the primary reward term raised)
    # one per agents.engines.EngineErrorKind: the engine returned no usable completion
    ERROR_ENGINE_TIMEOUT = "error:engine_timeout"
    ERROR_ENGINE_HTTP = "error:engine_http_error"
    ERROR_CONTEXT_OVERFLOW = "error:context_overflow"
    ERROR_ENGINE_BAD_RESPONSE = "error:engine_bad_response"
    ERROR_ENGINE_INTERNAL = "error:engine_internal"

    @property
    def outcome(self) -> Literal["ok", "truncated", "error"]:
        return self.value.partition(":")[0]  # type: ignore[return-value]

    @property
    def reason(self) -> str:
        """What ended it (``max_turns``, ``env``, ``engine_timeout``...; ``ok`` for OK)."""
        return self.value.rpartition(":")[2]

    @property
    def is_error(self) -> bool:
        return self.outcome == "error"

    @property
    def is_truncated(self) -> bool:
        return self.outcome == "truncated"

    @classmethod
    def truncation(cls, reason: Any) -> EpisodeStatus:
        """The status for an env truncation with ``info["truncation"] == reason``."""
        try:
            status = cls(f"truncated:{reason}")
        except ValueError:
            return cls.TRUNCATED_UNKNOWN
        return status if status.is_truncated else cls.TRUNCATED_UNKNOWN

    @classmethod
    def engine_error(cls, kind: Any) -> EpisodeStatus:
        """The status for an engine failure of ``EngineErrorKind`` ``kind`` (None: internal)."""
        try:
            return cls(f"error:{kind or 'engine_internal'}")
        except ValueError:
            return cls.ERROR_ENGINE_INTERNAL

    @classmethod
    def parse(cls, value: str) -> EpisodeStatus:
        """A status from its value, including the strings older files used."""
        if isinstance(value, cls):
            return value
        legacy = _LEGACY_STATUS.get(value)
        if legacy is not None:
            return legacy
        try:
            return cls(value)
        except ValueError:
            if isinstance(value, str) and value.startswith("truncated:"):
                return cls.TRUNCATED_UNKNOWN  # e.g. the RL worker's "truncated:None"
            allowed = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown episode status {value!r}; allowed: {allowed}") from None


# What the three loops wrote before there was one vocabulary (run_episode, the RL worker).
_LEGACY_STATUS = {
    "agent_error": EpisodeStatus.ERROR_AGENT,
    "env_error": EpisodeStatus.ERROR_ENV,
    "engine_error": EpisodeStatus.ERROR_ENGINE_INTERNAL,
}


@dataclass(slots=True)
class Segment:
    """One contiguous span: what the model generated in a turn, or one observation.

    ``versions`` (RL) is the policy version that sampled each token, aligned with
    ``token_ids``: an asynchronous rollout whose turn was interrupted by a weight update
    resumes under the new weights, so one turn may hold tokens of two versions, each with
    the logprob of the version that produced it. Empty when nobody recorded versions.
    """

    kind: SegmentKind
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

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
    status: EpisodeStatus = EpisodeStatus.OK
    seed: int | None = None
    sample_index: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_errors: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = EpisodeStatus.parse(self.status)

    # -- building -------------------------------------------------------------------
    def add_generated(
        self, text: str, token_ids: Iterable[int] = (), logprobs: Iterable[float] = (),
        versions: Iterable[int] = (),
    ) -> None:
        self.segments.append(Segment("generated", text, list(token_ids), list(logprobs),
                                     list(versions)))

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

    def sampled_versions(self) -> list[int]:
        """Policy version of each token of :meth:`response_ids` (-1 on observations and on
        generated tokens whose version was not recorded)."""
        out: list[int] = []
        for seg in self.segments:
            if seg.trainable and len(seg.versions) == len(seg.token_ids):
                out.extend(seg.versions)
            else:
                out.extend([-1] * len(seg.token_ids))
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


def run_trajectory_file(run: str | Path, writes_one: str) -> Path:
    """The trajectory JSONL of a run: ``run`` itself when it is a file, else the
    ``trajectories.jsonl`` that ``coa eval`` / ``coa teach`` write in their ``--out`` directory.

    Raises FileNotFoundError naming what was given and, from ``writes_one`` (e.g. "`coa eval
    ENV -k K --out DIR` writes one"), how to make what is missing; the callers that read runs
    (distillation, preference pairs) share this so that they accept the same paths.
    """
    run = Path(run)
    if not run.exists():
        raise FileNotFoundError(f"run not found: {run} does not exist; give a run directory or its "
                                f"trajectories.jsonl ({writes_one})")
    if run.is_file():
        return run
    path = run / "trajectories.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run} is not a run directory: it has no trajectories.jsonl ({writes_one})")
    return path


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

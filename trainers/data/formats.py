"""Read SFT data into one record, :class:`SftSample`, whatever file it came from.

Three sources are understood:

* our own ``Trajectory`` JSONL (``coa eval --out`` writes it): the prompt messages plus the
  generated/observation segments, and the exact token ids when a sampling policy kept them;
* ShareGPT-style records (``{"conversations": [{"from": "human"|"gpt"|..., "value": ...}]}``)
  and OpenAI-style records (``{"messages": [{"role", "content"}]}``), as the seed released its
  SFT data for LLaMA-Factory;
* Alpaca-style records (``instruction``/``input``/``output``/``system``/``history``), which is
  what LLaMA-Factory assumes when a dataset is registered by file name alone.

In the imported formats an assistant turn holds the whole CoA trajectory as text, with the
environment's ``<observation>…</observation>`` spans inline. Those are split off here *as text*
(a string split on the tags); tokenisation happens later, span by span, so the loss mask never
depends on finding a token sequence in tokenised output.

This module must not import torch or transformers (pyarrow, a core dependency, reads parquet).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from coa_envs.errors import UserError

__all__ = [
    "DataFormat",
    "DataFormatError",
    "FormatErrorKind",
    "Message",
    "SftSample",
    "Span",
    "load_samples",
    "sample_from_trajectory",
    "split_observations",
]

DataFormat = str  # "auto" | "trajectory" | "sharegpt" | "messages" | "alpaca"
_FORMATS = ("auto", "trajectory", "sharegpt", "messages", "alpaca")

# Whitespace the environment adds around an observation belongs to the observation: the model
# stops at the closing tool tag and the env appends "\n<observation>\n…\n</observation>\n\n".
_OBSERVATION_RE = re.compile(r"\s*<observation>.*?(?:</observation>\s*|\Z)", re.DOTALL)

_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
}


class FormatErrorKind(StrEnum):
    """Why a record could not be read; tests and reports count these."""

    UNKNOWN_FORMAT = "unknown_format"
    BAD_JSON = "bad_json"
    MISSING_FIELD = "missing_field"
    UNKNOWN_ROLE = "unknown_role"
    NO_ASSISTANT = "no_assistant"


class DataFormatError(UserError, ValueError):
    """A record that cannot become an SFT sample; names the file, row and kind."""

    def __init__(self, kind: FormatErrorKind, where: str, detail: str) -> None:
        super().__init__(f"{where}: {kind.value}: {detail}")
        self.kind = kind
        self.where = where


@dataclass(frozen=True, slots=True)
class Span:
    """A piece of an assistant turn: generated text (trained on) or an observation (not)."""

    text: str
    trainable: bool
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message. Assistant messages carry their content as spans."""

    role: str
    content: str
    spans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class SftSample:
    """A conversation to train on.

    ``prompt_ids`` is set only when the source kept exact token ids (a sampling policy's
    trajectory); then every span has ``token_ids`` too and no chat template is applied.
    ``prompt_text`` is the raw prompt for trajectories that have no chat messages.
    """

    sample_id: str
    messages: tuple[Message, ...]
    prompt_ids: tuple[int, ...] = ()
    prompt_text: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def has_token_ids(self) -> bool:
        return bool(self.prompt_ids)

    def texts(self) -> Iterator[str]:
        """Every piece of text in the sample (for training a tokenizer on the data)."""
        if self.prompt_text:
            yield self.prompt_text
        for message in self.messages:
            yield message.content


def split_observations(text: str) -> tuple[Span, ...]:
    """Split an assistant turn into generated spans and ``<observation>`` spans, by text."""
    spans: list[Span] = []
    cursor = 0
    for match in _OBSERVATION_RE.finditer(text):
        if match.start() > cursor:
            spans.append(Span(text[cursor : match.start()], True))
        spans.append(Span(match.group(0), False))
        cursor = match.end()
    if cursor < len(text):
        spans.append(Span(text[cursor:], True))
    return tuple(spans)


def sample_from_trajectory(trajectory: Any, sample_id: str | None = None) -> SftSample:
    """Turn an ``agents.trajectory.Trajectory`` into a sample (token ids kept when complete)."""
    exact = trajectory.has_token_ids
    spans = tuple(
        Span(seg.text, seg.trainable, tuple(seg.token_ids) if exact else ())
        for seg in trajectory.segments
        if seg.text or seg.token_ids
    )
    messages = [Message(m["role"], m["content"]) for m in trajectory.prompt_messages]
    content = "".join(span.text for span in spans)
    messages.append(Message("assistant", content, spans))
    return SftSample(
        sample_id=sample_id or f"{trajectory.env_id}/{trajectory.task_id}/{trajectory.sample_index}",
        messages=tuple(messages),
        prompt_ids=tuple(trajectory.prompt_ids) if exact else (),
        prompt_text="" if trajectory.prompt_messages else trajectory.prompt_text,
        meta={"reward": trajectory.reward, "env_id": trajectory.env_id},
    )


def _assistant(content: str) -> Message:
    return Message("assistant", content, split_observations(content))


def _from_chat(rows: list[dict[str, Any]], where: str, role_key: str, text_key: str,
               roles: dict[str, str] | None, system: str | None) -> tuple[Message, ...]:
    messages: list[Message] = []
    if system:
        messages.append(Message("system", system))
    for turn in rows:
        if role_key not in turn or text_key not in turn:
            raise DataFormatError(FormatErrorKind.MISSING_FIELD, where,
                                  f"turn needs {role_key!r} and {text_key!r}")
        raw_role = str(turn[role_key])
        role = roles.get(raw_role) if roles is not None else raw_role
        if role is None:
            raise DataFormatError(FormatErrorKind.UNKNOWN_ROLE, where, f"role {raw_role!r}")
        text = str(turn[text_key] or "")
        messages.append(_assistant(text) if role == "assistant" else Message(role, text))
    return tuple(messages)


def _from_alpaca(row: dict[str, Any], where: str) -> tuple[Message, ...]:
    if "instruction" not in row or "output" not in row:
        raise DataFormatError(FormatErrorKind.MISSING_FIELD, where,
                              "alpaca rows need 'instruction' and 'output'")
    messages: list[Message] = []
    if row.get("system"):
        messages.append(Message("system", str(row["system"])))
    for old_query, old_response in row.get("history") or []:
        messages += [Message("user", str(old_query)), _assistant(str(old_response))]
    query = str(row["instruction"])
    if row.get("input"):
        query = f"{query}\n{row['input']}"
    messages += [Message("user", query), _assistant(str(row["output"]))]
    return tuple(messages)


def _detect(row: dict[str, Any]) -> str:
    if "segments" in row and "env_id" in row:
        return "trajectory"
    if "conversations" in row:
        return "sharegpt"
    if "messages" in row:
        return "messages"
    if "instruction" in row and "output" in row:
        return "alpaca"
    return "unknown"


def _row_to_sample(row: dict[str, Any], fmt: str, where: str, index: int) -> SftSample:
    kind = _detect(row) if fmt == "auto" else fmt
    sample_id = str(row.get("id", row.get("task_id", f"row{index}")))
    if kind == "trajectory":
        from agents.trajectory import Trajectory

        try:
            return sample_from_trajectory(Trajectory.from_dict(row))
        except (TypeError, ValueError) as error:
            raise DataFormatError(FormatErrorKind.MISSING_FIELD, where, str(error)) from None
    if kind == "sharegpt":
        messages = _from_chat(row["conversations"], where, "from", "value", _SHAREGPT_ROLES,
                              row.get("system"))
    elif kind == "messages":
        messages = _from_chat(row["messages"], where, "role", "content", None, row.get("system"))
    elif kind == "alpaca":
        messages = _from_alpaca(row, where)
    else:
        raise DataFormatError(FormatErrorKind.UNKNOWN_FORMAT, where,
                              f"cannot tell the format of a row with keys {sorted(row)}")
    if not any(m.role == "assistant" for m in messages):
        raise DataFormatError(FormatErrorKind.NO_ASSISTANT, where, "no assistant turn")
    return SftSample(sample_id=sample_id, messages=messages)


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Hub datasets are often served as parquet (the converted view of a JSON upload)."""
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as error:  # pyarrow raises several types for a corrupt file
        raise DataFormatError(FormatErrorKind.BAD_JSON, str(path), f"unreadable parquet: {error}") from None
    yield from enumerate(rows, start=1)


def _single_object(text: str) -> dict[str, Any] | None:
    """The file's whole text as one JSON object, or None (an array, JSONL, or broken)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _is_metadata(path: Path) -> bool:
    """A ``.json`` file holding one object of no known format, e.g. ``coa eval``'s
    ``summary.json`` beside its ``trajectories.jsonl``: not data, skipped in a directory."""
    if path.suffix != ".json":
        return False
    single = _single_object(path.read_text(encoding="utf-8"))
    return single is not None and _detect(single) == "unknown"


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if path.suffix == ".parquet":
        yield from _parquet_rows(path)
        return
    text = path.read_text(encoding="utf-8")
    single = _single_object(text)
    if single is not None:  # one (possibly pretty-printed) record
        yield 1, single
        return
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataFormatError(FormatErrorKind.BAD_JSON, str(path), str(error)) from None
        yield from enumerate(rows, start=1)
        return
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # torn last line of a crashed writer
                return
            raise DataFormatError(FormatErrorKind.BAD_JSON, f"{path}:{number}", str(error)) from None


def load_samples(path: str | Path, fmt: DataFormat = "auto") -> list[SftSample]:
    """Read every record of a JSON/JSONL/parquet file, or of each such file under a directory
    (a ``coa eval --out`` directory works: its ``summary.json`` is recognised and skipped)."""
    if fmt not in _FORMATS:
        raise ValueError(f"format must be one of {_FORMATS}, not {fmt!r}")
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and (
        p.suffix == ".parquet" or p.suffix.startswith(".json"))) if path.is_dir() else [path]
    if path.is_dir():
        files = [f for f in files if not _is_metadata(f)]
    samples: list[SftSample] = []
    for file in files:
        for number, row in _rows(file):
            samples.append(_row_to_sample(row, fmt, f"{file}:{number}", len(samples)))
    return samples

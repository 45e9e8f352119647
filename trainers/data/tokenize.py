"""Turn an :class:`SftSample` into ``input_ids`` and ``labels`` with exact loss-mask boundaries.

The rule: text is cut into pieces *before* tokenisation (template scaffolding, each generated
span, each observation span, the end-of-turn marker), every piece is tokenised on its own and
the ids are concatenated. A piece's tokens get labels equal to their ids when the piece is
trained on and -100 otherwise, so a label boundary is always a piece boundary. We never search
for a tag's token sequence in tokenised output: BPE merges across a tag join (``"</code>\\n<"``)
would make such a search miss or shift, which is how the seed's masking broke.

The chat template is used by rendering growing prefixes of the conversation as *text* and
taking differences: the text a template adds between two messages is scaffolding (no loss),
the assistant's content is split into its spans, and what the template appends after the
assistant content (``<|im_end|>`` for ChatML) is trained up to and including the eos token so
the model learns to stop.

When a sample carries exact token ids (a sampling policy recorded them), they are used as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trainers.data.formats import Message, SftSample, Span

__all__ = ["IGNORE_INDEX", "TemplateError", "TemplateErrorKind", "TokenizedSample",
           "tokenize_sample"]

IGNORE_INDEX = -100
_SENTINEL = "\u2063COA_SFT_CONTENT\u2063"


class TemplateErrorKind(StrEnum):
    NO_CHAT_TEMPLATE = "no_chat_template"
    NOT_PREFIX_STABLE = "not_prefix_stable"


class TemplateError(ValueError):
    """The tokenizer's chat template cannot be split into token-exact pieces."""

    def __init__(self, kind: TemplateErrorKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind


@dataclass(frozen=True, slots=True)
class TokenizedSample:
    """Token ids with aligned labels (``labels[i] == input_ids[i]`` where trained, else -100)."""

    sample_id: str
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_trained(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE_INDEX)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def _render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )


class _Builder:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.labels: list[int] = []

    def add_ids(self, ids: list[int] | tuple[int, ...], trainable: bool) -> None:
        self.ids.extend(ids)
        self.labels.extend(ids if trainable else [IGNORE_INDEX] * len(ids))

    def add_text(self, text: str, trainable: bool) -> None:
        self.add_ids(_encode(self.tokenizer, text), trainable)

    def add_turn_end(self, text: str) -> None:
        """Train on the end-of-turn text up to and including eos; what follows is scaffolding."""
        ids = _encode(self.tokenizer, text)
        eos = self.tokenizer.eos_token_id
        cut = ids.index(eos) + 1 if eos in ids else len(ids)
        self.add_ids(ids[:cut], True)
        self.add_ids(ids[cut:], False)


def _as_dict(message: Message, content: str | None = None) -> dict[str, str]:
    return {"role": message.role, "content": message.content if content is None else content}


def _turn_suffix(tokenizer: Any, history: list[dict[str, str]], prefix: str) -> str:
    """The text the template writes after an assistant message's content."""
    rendered = _render(tokenizer, [*history, {"role": "assistant", "content": _SENTINEL}], False)
    at = rendered.find(_SENTINEL)
    if not rendered.startswith(prefix) or at < len(prefix):
        raise TemplateError(TemplateErrorKind.NOT_PREFIX_STABLE,
                            "rendering an assistant turn changes the text before it")
    return rendered[at + len(_SENTINEL):]


def _tokenize_chat(sample: SftSample, tokenizer: Any) -> _Builder:
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(TemplateErrorKind.NO_CHAT_TEMPLATE,
                            "the tokenizer has no chat_template; set one or use a chat model")
    builder = _Builder(tokenizer)
    history: list[dict[str, str]] = []
    rendered_so_far = ""
    last_assistant = max(i for i, m in enumerate(sample.messages) if m.role == "assistant")
    for index, message in enumerate(sample.messages[: last_assistant + 1]):
        if message.role != "assistant":
            history.append(_as_dict(message))
            continue
        prefix = _render(tokenizer, history, True)
        if not prefix.startswith(rendered_so_far):
            raise TemplateError(TemplateErrorKind.NOT_PREFIX_STABLE,
                                f"message {index}: template re-renders earlier turns differently")
        builder.add_text(prefix[len(rendered_so_far):], False)
        spans = message.spans or (Span(message.content, True),)
        for span in spans:
            builder.add_text(span.text, span.trainable)
        content = "".join(span.text for span in spans)
        suffix = _turn_suffix(tokenizer, history, prefix)
        builder.add_turn_end(suffix)
        history.append({"role": "assistant", "content": content})
        rendered_so_far = prefix + content + suffix
    return builder


def _tokenize_prompt_then_spans(sample: SftSample, tokenizer: Any) -> _Builder:
    """A prompt without chat messages, then the last turn's spans: no template to apply.

    Recorded token ids are taken as they are (the sampler's own ids, its stop included); a
    plain-text prompt and spans are tokenised piece by piece and closed with eos."""
    builder = _Builder(tokenizer)
    exact = sample.has_token_ids
    add = builder.add_ids if exact else builder.add_text
    add(sample.prompt_ids if exact else sample.prompt_text, False)
    for span in sample.messages[-1].spans:
        add(span.token_ids if exact else span.text, span.trainable)
    if not exact and tokenizer.eos_token_id is not None:
        builder.add_ids([tokenizer.eos_token_id], True)
    return builder


def tokenize_sample(sample: SftSample, tokenizer: Any) -> TokenizedSample:
    """Token ids and labels for one sample (see the module docstring for the rule)."""
    if sample.has_token_ids or (sample.prompt_text and len(sample.messages) == 1):
        builder = _tokenize_prompt_then_spans(sample, tokenizer)
    else:
        builder = _tokenize_chat(sample, tokenizer)
    return TokenizedSample(sample.sample_id, tuple(builder.ids), tuple(builder.labels))

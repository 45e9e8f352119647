"""The request bodies of ``coa serve`` (pydantic models FastAPI validates).

Undeclared fields are kept (``extra="allow"``) so :func:`agents.openai_errors.refuse_unsupported`
can name each one the server does not implement instead of dropping it silently.
"""

# No ``from __future__ import annotations``: FastAPI must see these classes as real types.
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ChatBody", "CommonBody", "CompletionBody"]


class CommonBody(BaseModel):
    """The fields both endpoints share (OpenAI's, plus vLLM's extensions)."""

    model_config = ConfigDict(extra="allow")  # undeclared fields are checked by refuse_unsupported
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)  # 0 would otherwise fall back to the default limit
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = Field(1, ge=1, le=64)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    include_stop_str_in_output: bool = False
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False

class CompletionBody(CommonBody):
    """``POST /v1/completions``."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0)
    echo: bool = False
    best_of: int | None = None

class ChatBody(CommonBody):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]]
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # false: at most one call comes back

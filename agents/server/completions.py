"""``POST /v1/completions`` of ``coa serve``."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from agents.openai_errors import APIError
from agents.openai_wire import finish_reason, visible_text
from agents.server.bodies import CompletionBody
from agents.server.stream import streamed

if TYPE_CHECKING:
    from agents.server.model import ServedModel

__all__ = ["completions"]


async def completions(served: ServedModel, body: CompletionBody) -> Any:
    """``POST /v1/completions``: text or token-id prompts, ``n`` choices each, ``echo``, logprobs of the
    sampled tokens; streamed when asked (:mod:`agents.server.stream`)."""
    from fastapi.responses import JSONResponse

    served.checked(body, CompletionBody)
    served.check_top_logprobs(body.logprobs, "logprobs")
    if body.best_of not in (None, body.n):
        raise APIError(400, "best_of is not supported (every sampled choice is returned); use n",
                       code="unsupported_parameter", param="best_of")
    if body.echo and body.logprobs is not None:
        raise APIError(400, "echo with logprobs would need the prompt's logprobs, which this server does "
                            "not compute; send one of them", code="unsupported_value", param="echo")
    raw = body.prompt
    if isinstance(raw, str) or (raw and isinstance(raw[0], int)):
        prompts = [served.prompt_ids(raw)]  # type: ignore[arg-type]
    else:
        prompts = [served.prompt_ids(p) for p in raw]  # type: ignore[union-attr]
    if body.stream:
        if len(prompts) != 1:
            raise APIError(400, "stream supports one prompt; send a single prompt or stream=false",
                           code="unsupported_value", param="prompt")
        echo = served.tokenizer.decode(prompts[0], skip_special_tokens=False) if body.echo else ""
        return streamed(served, prompts[0], body, "text_completion", echo)
    done = await served.run(prompts, body, 16)
    choices = []
    for index, completion in enumerate(done):
        served.check(completion)
        text = visible_text(completion.action_text, completion.stop_string,
                            body.include_stop_str_in_output)
        if body.echo:
            text = served.tokenizer.decode(prompts[index // body.n], skip_special_tokens=False) + text
        choice: dict[str, Any] = {"index": index, "text": text,
                                  "finish_reason": finish_reason(completion),
                                  "stop_reason": completion.stop_string, "logprobs": None}
        if body.logprobs is not None:
            choice["logprobs"] = served.completion_logprobs(list(completion.token_ids), list(completion.logprobs),
                                                            body.return_tokens_as_token_ids,
                                                            tops=completion.top_logprobs)
        if body.return_token_ids:
            choice["token_ids"] = list(completion.token_ids)
            choice["prompt_token_ids"] = prompts[index // body.n]
        choices.append(choice)
    return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                         "created": int(time.time()), "model": served.model_name,
                         "choices": choices, "usage": served.counts(prompts, done)})

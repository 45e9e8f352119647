"""``POST /v1/chat/completions`` of ``coa serve``."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from agents.openai_errors import APIError, check_messages, check_tools
from agents.openai_wire import chat_logprobs, finish_reason, visible_text
from agents.server.bodies import ChatBody
from agents.server.stream import streamed
from agents.toolcalls import parse_reply, wire_message

if TYPE_CHECKING:
    from agents.server.model import ServedModel

__all__ = ["chat"]


async def chat(served: ServedModel, body: ChatBody) -> Any:
    """``POST /v1/chat/completions``: the rendered chat template, ``n`` choices, tool calls read back
    from the reply when the request has ``tools``; streamed when asked."""
    from fastapi.responses import JSONResponse

    served.checked(body, ChatBody)
    check_messages(body.messages)
    check_tools(body.tools, body.tool_choice)
    served.check_top_logprobs(body.top_logprobs, "top_logprobs")
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", code="invalid_value", param="top_logprobs")
    prompt_text, ids = served.chat_prompt(body)
    use_tools = bool(body.tools) and body.tool_choice != "none"
    if body.stream:
        return streamed(served, ids, body, "chat.completion.chunk", prompt_text=prompt_text)
    done = await served.run([ids], body, 512)
    choices = []
    for index, completion in enumerate(done):
        served.check(completion)
        text = visible_text(completion.action_text, completion.stop_string,
                            body.include_stop_str_in_output)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = finish_reason(completion)
        if use_tools:  # read the calls the model wrote in its template's format
            reply = wire_message(parse_reply(served.tokenizer, completion.text, prompt_text, body.tools),
                                 body.parallel_tool_calls)
            if reply.get("tool_calls"):  # a reply without calls is its text, as when streamed
                message, finish = reply, "tool_calls"
        choice: dict[str, Any] = {
            "index": index, "message": message,
            "finish_reason": finish, "stop_reason": completion.stop_string,
            "logprobs": None}
        if body.logprobs:
            choice["logprobs"] = {"content": chat_logprobs(
                served.tokenizer, completion.token_ids, completion.logprobs, body.return_tokens_as_token_ids,
                completion.top_logprobs)}
        if body.return_token_ids:
            choice["token_ids"] = list(completion.token_ids)
            choice["prompt_token_ids"] = ids
        choices.append(choice)
    return JSONResponse({"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                         "created": int(time.time()), "model": served.model_name,
                         "choices": choices, "usage": served.counts([ids], done)})

"""An OpenAI-compatible HTTP server over any local :class:`~agents.engines.Engine`.

``coa serve`` runs it; tests start it on 127.0.0.1 with the tiny model and drive it with
the ``openai`` engine, so the HTTP engine is exercised against a real server offline.
Endpoints: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``
(both with ``stream``, ``logprobs``, ``stop``, ``seed``, ``n``). It also accepts the vLLM
server's extensions, so clients written for vLLM work unchanged: ``top_k``,
``include_stop_str_in_output``, ``return_tokens_as_token_ids``, ``return_token_ids``
(adds ``token_ids``/``prompt_token_ids`` to each choice, and to a stream's chunks: each chunk's
sampled ids, the prompt's in the first), token-id prompts, and
``add_generation_prompt``/``continue_final_message`` for chat. ``stop_reason`` names the
stop string that ended a choice, as vLLM does. Chat requests may carry ``tools`` (``tool_choice: none``
turns them off; ``required`` or a named function is best effort: the model is not
constrained) for a model whose chat template renders them: the
template gets the definitions, and the calls the model writes come back as ``tool_calls``
(``finish_reason: tool_calls``); assistant ``tool_calls`` and ``tool`` messages in the
history are rendered by the template.

Conventions kept (as OpenAI's API and vLLM's server do): every error is
``{"error": {"message", "type", "code", "param"}}`` (:mod:`agents.openai_errors`); a request
naming a model this server does not serve is a 404 (``model_not_found``; ``model`` left out
means the served one); a request field that is not implemented is refused with a 400 naming
it, never silently ignored (``response_format`` other than text, since decoding is not
constrained to a schema; ``logit_bias``, penalties, ``top_logprobs`` from an engine that does not
compute them...), while ``stream_options.include_usage``, ``echo``, ``top_logprobs`` (up to 20;
completions' ``logprobs=k``) and ``n`` (streamed too, interleaved by choice ``index``) are
implemented.

Concurrent requests are merged into shared batches by :class:`BatchingEngine`. Streaming is
real: tokens go out as the engine samples them, with their logprobs when asked (text deltas
are held back while a stop string might still be forming, so a streamed stop string never
leaks; with ``tools``, the text from the tool-call opener on becomes the ``tool_calls`` delta).
A client that hangs up (a stream closed early, a JSON reply it stopped waiting for) cancels its
generation: the engine stops decoding it at the next step (:mod:`agents.http_streams`).

Layout: :mod:`agents.server.app` assembles the app; :mod:`~agents.server.bodies` holds the
request bodies, :mod:`~agents.server.model` what every route asks of the served model,
and :mod:`~agents.server.completions`, :mod:`~agents.server.chat` and
:mod:`~agents.server.stream` one route each.
"""

from agents.server.app import create_app, serve_in_thread

__all__ = ["create_app", "serve_in_thread"]

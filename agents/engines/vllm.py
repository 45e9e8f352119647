"""The ``vllm`` engine: vLLM's offline ``LLM`` (optional ``[vllm]`` extra, needs a GPU).

vLLM schedules and batches by itself (continuous batching, paged KV cache), so a whole
batch of requests goes in one ``LLM.generate`` call with token-id prompts. Each request
asks for the sampled token's logprob (``logprobs=0``) and keeps the stop string in the
output; the text is re-decoded from the ids so ``decode(ids) == text`` holds exactly as
with the ``hf`` engine (vLLM's own text is cut at the stop string, its ids are not).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from agents.engines import Completion, EngineErrorKind, GenerationRequest, SamplingParams

__all__ = ["VLLMEngine"]


class VLLMEngine:
    """``model``: a local directory or hub id vLLM can load; ``llm_kwargs`` go to ``vllm.LLM``
    (``dtype``, ``gpu_memory_utilization``, ``max_model_len``, ``tensor_parallel_size``…)."""

    name = "vllm"

    def __init__(self, model: str, *, seed: int = 0, **llm_kwargs: Any):
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError("the vllm engine needs `pip install coa-envs[vllm]` "
                              "(and a CUDA GPU)") from exc
        self._vllm = vllm
        self.llm = vllm.LLM(model=model, seed=seed, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.eos_text = self.tokenizer.eos_token or ""
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _params(self, params: SamplingParams) -> Any:
        return self._vllm.SamplingParams(
            n=1, temperature=params.temperature, top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1, max_tokens=params.max_new_tokens,
            stop=list(params.stop), include_stop_str_in_output=True, logprobs=0,
            seed=params.seed)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]:
        prompts = [{"prompt_token_ids": list(r.token_ids) or self.encode(r.text)}
                   for r in requests]
        sampling = [self._params(r.params or params) for r in requests]
        try:
            with self._lock:
                outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            kind = (EngineErrorKind.CONTEXT_OVERFLOW if "longer than" in message
                    else EngineErrorKind.INTERNAL)
            return [Completion.failure(kind, message) for _ in requests]
        return [self._completion(out.outputs[0], r) for out, r in
                zip(outputs, requests, strict=True)]

    def _completion(self, output: Any, request: GenerationRequest) -> Completion:
        ids = tuple(int(t) for t in output.token_ids)
        logprobs = tuple(float(step[t].logprob) for step, t in zip(output.logprobs or [], ids,
                                                                     strict=False))
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        stop = output.stop_reason if isinstance(output.stop_reason, str) else None
        if output.finish_reason == "length":
            reason = "length"
        elif stop is not None:
            reason = "stop"
        else:
            reason = "eos"
        if request.on_token is not None:  # vLLM's offline API does not stream
            for token, logprob in zip(ids, logprobs, strict=False):
                request.on_token(token, logprob)
        return Completion(text, ids, logprobs, reason, stop, eos_text=self.eos_text,  # type: ignore[arg-type]
                          usage={"completion_tokens": len(ids)})

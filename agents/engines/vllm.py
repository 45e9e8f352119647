"""The ``vllm`` engine: vLLM's offline ``LLM`` (optional ``[vllm]`` extra, needs a GPU).

vLLM schedules and batches by itself (continuous batching, paged KV cache), so a whole
batch of requests goes in one ``LLM.generate`` call with token-id prompts. Each request
asks for the sampled token's logprob (``logprobs=0``) and keeps the stop string in the
output; the text is re-decoded from the ids so ``decode(ids) == text`` holds exactly as
with the ``hf`` engine (vLLM's own text is cut at the stop string, its ids are not).

Two things RL depends on:

* **Which logprobs.** By default vLLM reports *raw* logprobs (before temperature), while the
  token was sampled from ``softmax(logits / T)``; an importance ratio anchored on raw
  logprobs is off by the temperature on every token. Where the installed vLLM has the
  ``logprobs_mode`` engine argument (0.10.2+), the engine asks for ``processed_logprobs``
  (after temperature; also after top-k/top-p, which RL leaves off). Where it has not, a
  request with temperature != 1 gets *no* logprobs back (``Completion.logprobs == ()``):
  the RL learner then recomputes the behaviour logprobs itself at the same temperature
  (``Learner.prepare``: episodes without engine logprobs use the learner's), so the
  ratio is right, at the cost of losing the correction for a stale (pipelined) rollout.
  :attr:`VLLMEngine.processed_logprobs` says which case holds.
* **Weight updates.** :meth:`VLLMEngine.load_weights` loads new weights into the running
  workers and then resets the prefix cache: cached KV blocks were computed with the old
  weights, and a prompt sharing a prefix with an earlier one would reuse them.
* **LoRA.** A learner that trains adapters syncs them only (:meth:`VLLMEngine.load_lora`):
  each version is written as a peft adapter directory and served through vLLM's LoRA path
  (``enable_lora``, one ``LoRARequest`` per version, so vLLM never serves a cached older
  adapter under the new name). ``model`` may itself be an adapter directory: its base is
  loaded and every request carries the adapter.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from agents.engines import Completion, EngineErrorKind, GenerationRequest, SamplingParams

__all__ = ["VLLMEngine"]

_PROCESSED = "processed_logprobs"


def _supports_logprobs_mode(vllm: Any) -> bool:
    """Whether this vLLM's engine arguments include ``logprobs_mode`` (0.10.2 and later)."""
    engine_args = getattr(vllm, "EngineArgs", None)
    if engine_args is None or not dataclasses.is_dataclass(engine_args):
        return False
    return any(f.name == "logprobs_mode" for f in dataclasses.fields(engine_args))


class VLLMEngine:
    """``model``: a local directory, hub id or catalogue name (:mod:`agents.models`) vLLM can
    load; ``llm_kwargs`` go to ``vllm.LLM``
    (``dtype``, ``gpu_memory_utilization``, ``max_model_len``, ``tensor_parallel_size``…)."""

    name = "vllm"

    def __init__(self, model: str, *, seed: int = 0, **llm_kwargs: Any):
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError("the vllm engine needs `pip install coa-envs[vllm]` "
                              "(and a CUDA GPU)") from exc
        from agents.models import adapter_base, resolve_model

        self._vllm = vllm
        if "logprobs_mode" not in llm_kwargs and _supports_logprobs_mode(vllm):
            llm_kwargs["logprobs_mode"] = _PROCESSED
        self.processed_logprobs = llm_kwargs.get("logprobs_mode") == _PROCESSED
        base = adapter_base(model)
        if base is not None:  # an adapter directory: serve its base with the adapter on
            llm_kwargs.setdefault("enable_lora", True)
            llm_kwargs.setdefault("max_lora_rank", _adapter_rank(model))
        self.llm = vllm.LLM(model=base or resolve_model(model), seed=seed, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.eos_text = self.tokenizer.eos_token or ""
        self._lock = threading.Lock()
        self.lora_request: Any = None
        self._lora_versions = 0
        self._lora_dir: Any = None
        if base is not None:
            self._use_adapter(str(model))

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
                extra = {"lora_request": self.lora_request} if self.lora_request else {}
                outputs = self.llm.generate(prompts, sampling, use_tqdm=False, **extra)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            kind = (EngineErrorKind.CONTEXT_OVERFLOW if "longer than" in message
                    else EngineErrorKind.INTERNAL)
            return [Completion.failure(kind, message) for _ in requests]
        return [self._completion(out.outputs[0], r, r.params or params) for out, r in
                zip(outputs, requests, strict=True)]

    def _completion(self, output: Any, request: GenerationRequest,
                    params: SamplingParams) -> Completion:
        ids = tuple(int(t) for t in output.token_ids)
        logprobs: tuple[float, ...] = ()
        # Raw logprobs of a tempered sample are not the sampling distribution's; report
        # none rather than wrong ones (trainers recompute them, see the module docstring).
        if self.processed_logprobs or params.temperature in (0.0, 1.0):
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
            for index, token in enumerate(ids):
                request.on_token(token, logprobs[index] if index < len(logprobs) else float("nan"))
        return Completion(text, ids, logprobs, reason, stop, eos_text=self.eos_text,  # type: ignore[arg-type]
                          usage={"completion_tokens": len(ids)})

    # -- weights ---------------------------------------------------------------------------
    def load_weights(self, state: dict[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Load new weights (name -> tensor) into every vLLM worker, then drop the prefix
        cache, whose KV blocks the old weights computed."""
        items = list(state.items()) if isinstance(state, dict) else list(state)
        with self._lock:
            if hasattr(self.llm, "collective_rpc"):  # vLLM V1 (and late V0): every worker
                self.llm.collective_rpc(_load_in_worker, args=(items,))
            else:  # older V0: one in-process driver worker
                runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
                runner.model.load_weights(items)
            self.llm.reset_prefix_cache()


    def load_lora(self, weights: Any) -> None:
        """Serve new adapter weights (:class:`agents.engines.lora.LoraWeights`) through
        vLLM's LoRA path: written as a peft adapter directory, requested under a new id
        (the engine must be built with ``enable_lora=True`` and ``max_lora_rank`` >= r)."""
        import tempfile

        from agents.engines.lora import write_adapter_dir

        if self._lora_dir is None:
            self._lora_dir = tempfile.TemporaryDirectory(prefix="coa-vllm-lora-")
        import shutil

        root = self._lora_dir.name
        directory = write_adapter_dir(weights, f"{root}/v{self._lora_versions + 1}")
        with self._lock:
            self._use_adapter(str(directory))
            self.llm.reset_prefix_cache()
        # no request names an adapter two versions old any more
        shutil.rmtree(f"{root}/v{self._lora_versions - 2}", ignore_errors=True)

    def _use_adapter(self, directory: str) -> None:
        from vllm.lora.request import LoRARequest

        self._lora_versions += 1
        self.lora_request = LoRARequest(f"coa-adapter-{self._lora_versions}",
                                        self._lora_versions, directory)


def _adapter_rank(directory: str) -> int:
    import json
    from pathlib import Path

    config = json.loads((Path(directory) / "adapter_config.json").read_text(encoding="utf-8"))
    return int(config.get("r", 16))


def _load_in_worker(worker: Any, items: list[tuple[str, Any]]) -> None:  # runs inside vLLM
    worker.model_runner.model.load_weights(items)

"""The ``hf`` engine: continuous batching over a transformers causal LM, reusing KV caches.

Why a decode loop of our own instead of ``model.generate``: RL needs, per request, the
exact sampled ids, their logprobs, a stop at the first protocol stop string (checked on the
decoded tail, so stops split across tokens are caught), and a private random generator so a
request samples the same tokens whichever other requests share its batch. ``generate``
offers none of the last and only parts of the rest. The model forward and its masking are
transformers' own.

How a multi-turn rollout stays fast (measured in ``benchmarks/test_generation_bench.py``):

* Continuous batching: requests join the running batch between decode steps and leave it
  when they finish, so a row waiting on its tool never holds up the others and a short
  turn never idles until the batch's longest one ends (:meth:`HFEngine.serve`, driven by
  :class:`~agents.engines.batching.BatchingEngine`).
* KV reuse: a turn's prompt is the previous turn's context plus its sampled ids plus the
  observation's ids. When a row finishes, its keys/values are stored under the ids they
  cover (:class:`~agents.engines.kv_cache.PrefixCache`); the next request that extends
  those ids prefills only the new suffix. Requests admitted together that share a long
  prefix (the system prompt, or one prompt sampled ``group_size`` times in RL) prefill it
  once. The store is bounded (``kv_cache_bytes``), an episode's entry is dropped by
  :meth:`HFEngine.release` when it ends, and everything is dropped when the weights
  change (RL updates), since stale keys/values would bias the sampled logprobs.
* Models whose cache cannot be cut and re-padded (sliding-window, recurrent, non-
  transformers modules) fall back to one static batch per call with full prefill.

Reported logprobs are ``log_softmax(logits / temperature)`` of the sampled token
(temperature 1 for greedy rows), before top-k/top-p filtering: the quantity trainers
recompute. Reused keys/values were computed by the same weights on the same ids, so the
difference from a full forward pass is float rounding (~1e-6 in float32).
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from agents.engines import Completion, EngineErrorKind, GenerationRequest, SamplingParams

__all__ = ["HFEngine"]

# transformers 5.x renamed the forward's ``past_key_values`` to ``cache`` and warns on every
# decode step's first call; the old name still works and the warning only buried a newcomer's
# first screen (the engine passes the cache explicitly, as every transformers 4.x/5.x accepts).
warnings.filterwarnings("ignore", message=r".*`past_key_values` is deprecated", category=FutureWarning)

#: ``take(limit, block)`` -> up to ``limit`` ``(request, deliver)`` pairs; None when closed.
Take = Callable[[int, bool], "list[tuple[GenerationRequest, Callable[[Completion], None]]] | None"]


class HFEngine:
    """A local transformers model. ``model`` is a path/hub id (loaded offline), a catalogue
    name such as ``smollm2-135m`` (:mod:`agents.models`) or a model object.

    ``device`` ("cpu", "cuda", "cuda:1") and ``dtype`` ("float32", "bfloat16", "float16",
    "auto") apply when loading. ``max_batch_size`` caps rows per forward pass;
    ``max_context`` (default: the model's ``max_position_embeddings``) caps prompt+output.
    ``kv_cache_bytes`` bounds the stored keys/values of finished turns (0 disables reuse);
    ``min_shared_prefix`` is the shortest common prompt prefix worth prefilling once for
    several requests. Thread-safe; wrap in :class:`BatchingEngine` to merge concurrent
    callers into one continuously batched decode loop.
    """

    name = "hf"
    supports_top_logprobs = True  # SamplingParams.top_logprobs: the most likely tokens of each step

    def __init__(
        self,
        model: Any,
        tokenizer: Any | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_batch_size: int = 32,
        max_context: int | None = None,
        attn_implementation: str | None = None,
        kv_cache_bytes: int = 1 << 30,
        min_shared_prefix: int = 32,
    ):
        import torch

        from agents.engines.kv_cache import PrefixCache, supports_kv_reuse

        self.torch = torch
        if isinstance(model, str):  # a catalogue name, hub id, directory or LoRA adapter
            from agents.models import load_causal_lm

            torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
            kwargs: dict[str, Any] = {}
            if attn_implementation:
                kwargs["attn_implementation"] = attn_implementation
            model, own_tokenizer = load_causal_lm(model, dtype=torch_dtype, **kwargs)
            tokenizer = tokenizer if tokenizer is not None else own_tokenizer
        elif dtype != "auto":
            model = model.to(getattr(torch, dtype))
        if tokenizer is None:
            raise ValueError("pass the tokenizer together with a model object")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size}; must be >= 1")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.max_batch_size = max_batch_size
        self.max_context = max_context or getattr(model.config, "max_position_embeddings", 4096)
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids = frozenset(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else next(iter(self.eos_ids), 0)
        self.eos_text = tokenizer.eos_token or ""
        #: Continuous batching with KV reuse, or one static batch per call (see module doc).
        self.continuous = supports_kv_reuse(self.model)
        self.prefix_cache = PrefixCache(kv_cache_bytes)
        self.min_shared_prefix = min_shared_prefix
        #: Token accounting: prefilled / reused (cached) prompt tokens, decode steps and rows.
        self.stats: Counter[str] = Counter()
        self._weights_seen: int | None = None
        self._cache_checked = False
        self._lock = threading.Lock()
        self._interrupted = threading.Event()

    # -- public -------------------------------------------------------------------------
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]:
        """Complete ``requests`` (``params`` for those without their own), decoded as one
        continuous batch of at most ``max_batch_size`` rows; results keep the order."""
        results: list[Completion | None] = [None] * len(requests)
        pending = deque(
            (request if request.params else dataclasses.replace(request, params=params),
             _setter(results, i))
            for i, request in enumerate(requests))

        def take(limit: int, block: bool) -> list[Any] | None:
            if self._interrupted.is_set():  # not started: nothing sampled, nothing kept
                while pending:
                    pending.popleft()[1](_aborted(self.eos_text))
            if not pending:
                return None
            return [pending.popleft() for _ in range(min(limit, len(pending)))]

        self.serve(take)
        assert all(c is not None for c in results)
        return results  # type: ignore[return-value]

    def serve(self, take: Take, stop: threading.Event | None = None) -> None:
        """Decode until ``take`` reports closed and no row is left, or until ``stop`` is set.

        Between decode steps, ``take(room, block=False)`` admits new requests; with no row
        in flight it is called with ``block=True`` (the lock is not held while it waits).
        Each request's completion goes to its ``deliver`` callback as soon as it finishes.
        Once ``stop`` is set (the batching worker is closing), rows still decoding (an episode
        abandoned at its deadline) are answered with an error at the next step instead of being
        decoded to the end, so no forward pass is still running when the process exits.
        """
        if self.continuous:
            with self._lock:
                self._check_cache_support()
        if not self.continuous:
            while (items := take(self.max_batch_size, True)) is not None:
                with self._lock:
                    rows = self._rows(items)
                    if rows:
                        self._guard(rows, self._run_static)
            return
        from agents.engines.continuous import RunningBatch

        batch = RunningBatch(self)
        closed = False
        while True:
            if stop is not None and stop.is_set():
                for row in batch.rows:
                    if row.finish is None:
                        row.deliver(Completion.failure(EngineErrorKind.INTERNAL, "the engine was closed"))
                return
            if batch.rows and self._interrupted.is_set():
                for row in batch.rows:  # each row's sampled tokens go back, marked "abort"
                    self._abort(row)
                batch = RunningBatch(self)
            if not batch.rows:
                if closed or (items := take(self.max_batch_size, True)) is None:
                    return
            else:
                room = self.max_batch_size - len(batch.rows)
                items = take(room, False) if room > 0 and not closed else []
                if items is None:
                    closed, items = True, []
            with self._lock:
                new_rows = self._rows(items)
                every = batch.rows + new_rows
                try:
                    batch.step(new_rows)
                except Exception as exc:  # a broken batch fails its requests, not the run
                    message = f"{type(exc).__name__}: {exc}"
                    for row in every:
                        if row.finish is None:
                            row.deliver(Completion.failure(EngineErrorKind.INTERNAL, message))
                    batch = RunningBatch(self)

    def interrupt(self) -> None:
        """Stop every generation in flight at the next decode step: each request gets what
        it sampled so far (``finish_reason="abort"``; requests not yet started get nothing)
        and :meth:`generate` returns. Requests keep being aborted until
        :meth:`clear_interrupt`. Safe from any thread: an RL weight update calls it so the
        new weights load between decode steps, and the turns resume under them."""
        self._interrupted.set()

    def clear_interrupt(self) -> None:
        """Generate normally again after :meth:`interrupt`."""
        self._interrupted.clear()

    def _abort(self, row: Any) -> None:
        row.finish = "abort"
        self._finish(row)

    def release(self, token_ids: Sequence[int]) -> int:
        """An episode whose context was ``token_ids`` is over: drop the keys/values stored
        for it. Returns how many entries were dropped. Safe from any thread."""
        return self.prefix_cache.release(list(token_ids))

    def load_lora(self, weights: Any) -> None:
        """New LoRA adapter weights (:class:`agents.engines.lora.LoraWeights`, what an RL
        learner training adapters syncs): injected into the model on the first call, copied
        in afterwards, between decode steps. Stored keys/values are dropped (the weights
        changed)."""
        from agents.engines.lora import load_into_model

        with self._lock:
            load_into_model(self.model, weights)

    def load_state(self, state: dict[str, Any]) -> None:
        """New full weights (name -> tensor), between decode steps."""
        with self._lock:
            self.model.load_state_dict(state, strict=True)

    def clear_kv_cache(self) -> None:
        """Drop every stored prefix (done automatically when the weights change)."""
        self.prefix_cache.clear()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    # -- requests -> rows -----------------------------------------------------------------
    def _rows(self, items: list[tuple[GenerationRequest, Callable[[Completion], None]]]) -> list:
        from agents.engines.sampling import RowState

        rows = []
        for request, deliver in items:
            try:
                ids = list(request.token_ids) if request.token_ids else self.encode(request.text)
            except Exception as exc:  # e.g. a text prompt the tokenizer rejects
                deliver(Completion.failure(EngineErrorKind.BAD_RESPONSE,
                                           f"cannot encode the prompt: {exc}"))
                continue
            params = request.params or SamplingParams()
            if request.cancelled:  # its caller left while it was queued: sample nothing
                deliver(_aborted(self.eos_text))
            elif not ids:
                deliver(Completion.failure(EngineErrorKind.BAD_RESPONSE, "empty prompt"))
            elif len(ids) >= self.max_context:
                deliver(Completion.failure(
                    EngineErrorKind.CONTEXT_OVERFLOW,
                    f"prompt has {len(ids)} tokens; the context limit is {self.max_context}"))
            else:
                budget = min(params.max_new_tokens, self.max_context - len(ids))
                try:
                    rows.append(RowState(ids, params, budget, deliver, request.on_token,
                                         request.resume_ids, request.cancel))
                except Exception as exc:  # a setting torch refuses fails its request, never the worker
                    deliver(Completion.failure(EngineErrorKind.BAD_RESPONSE,
                                               f"cannot start the request: {type(exc).__name__}: {exc}"))
        return rows

    def _guard(self, rows: list, run: Callable[[list], None]) -> None:
        try:
            run(rows)
        except Exception as exc:  # a broken batch fails its requests, not the run
            message = f"{type(exc).__name__}: {exc}"
            for row in rows:
                if row.finish is None:
                    row.deliver(Completion.failure(EngineErrorKind.INTERNAL, message))

    def _finish(self, row: Any) -> None:
        self.stats["generated_tokens"] += len(row.generated)
        row.deliver(row.completion(self.tokenizer, self.eos_text))

    def _num_layers(self) -> int:
        config = self.model.config
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        return int(text.num_hidden_layers)

    def _check_cache_support(self) -> None:
        """Once: run two tokens through the model with a :class:`BatchCache`; a model that
        does not fill it (custom caching) falls back to static batches."""
        if self._cache_checked:
            return
        self._cache_checked = True
        from agents.engines.continuous import prefill

        try:
            cache, _ = prefill(self, [None], [[self.pad_id, self.pad_id]])
            self.continuous = cache.complete() and cache.width == 2
        except Exception:
            self.continuous = False
        self.stats.clear()

    def _drop_stale_cache(self) -> None:
        """Stored keys/values belong to the weights that computed them: when any parameter
        was replaced or modified in place (an RL update, ``load_state_dict``), drop them."""
        fingerprint = hash(tuple((id(p), p._version) for p in self.model.parameters()))
        if self._weights_seen is not None and fingerprint != self._weights_seen:
            self.prefix_cache.clear()
            self.stats["cache_invalidations"] += 1
        self._weights_seen = fingerprint

    # -- static fallback ------------------------------------------------------------------
    def _run_static(self, rows: list) -> None:
        """One left-padded batch to the end, full prefill (models without KV reuse)."""
        from transformers import DynamicCache

        from agents.engines.continuous import left_pad
        from agents.engines.sampling import pick_tokens

        torch = self.torch
        n = len(rows)
        device = self.model.device
        input_ids, mask = left_pad([row.prompt_ids for row in rows], self.pad_id, device)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        self.stats["prefill_tokens"] += sum(len(r.prompt_ids) for r in rows)
        with torch.inference_mode():
            output = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                                past_key_values=cache, use_cache=True, logits_to_keep=1)
            while True:
                active = [i for i, row in enumerate(rows) if row.finish is None]
                if self._interrupted.is_set():
                    for i in active:
                        self._abort(rows[i])
                    return
                logits = output.logits[:, -1, :]
                index = torch.tensor(active, device=logits.device)
                tokens, logprobs, tops = pick_tokens(logits.index_select(0, index),
                                                     [rows[i] for i in active])
                for i, token, logprob, top in zip(active, tokens, logprobs, tops, strict=True):
                    if rows[i].accept(token, logprob, self.tokenizer, self.eos_ids, top):
                        self._finish(rows[i])
                if all(row.finish is not None for row in rows):
                    return
                next_ids = torch.tensor(
                    [[row.generated[-1] if row.finish is None else self.pad_id] for row in rows],
                    device=device)
                mask = torch.cat([mask, mask.new_ones((n, 1))], dim=1)
                position_ids = position_ids[:, -1:] + 1
                output = self.model(input_ids=next_ids, attention_mask=mask,
                                    position_ids=position_ids, past_key_values=cache,
                                    use_cache=True)
                self.stats["decode_steps"] += 1
                self.stats["decode_rows"] += n


def _aborted(eos_text: str) -> Completion:
    return Completion(text="", finish_reason="abort", eos_text=eos_text)


def _setter(results: list, index: int) -> Callable[[Completion], None]:
    def deliver(completion: Completion) -> None:
        results[index] = completion

    return deliver

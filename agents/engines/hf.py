"""The ``hf`` engine: batched sampling with a transformers causal LM and its KV cache.

Why a decode loop of our own instead of ``model.generate``: RL needs, per request, the
exact sampled ids, their logprobs, a stop at the first protocol stop string (checked on the
decoded tail, so stops split across tokens are caught), and a private random generator so a
request samples the same tokens whichever other requests share its batch. ``generate``
offers none of the last and only parts of the rest. The model forward, the cache
(``DynamicCache``) and left-padded attention are transformers' own.

Reported logprobs are ``log_softmax(logits / temperature)`` of the sampled token (temperature
1 for greedy rows), i.e. before top-k/top-p filtering, the quantity trainers recompute.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from agents.engines import (
    Completion,
    EngineErrorKind,
    GenerationRequest,
    SamplingParams,
    find_stop,
)

__all__ = ["HFEngine"]


class HFEngine:
    """A local transformers model. ``model`` is a path/hub id (loaded offline) or a model.

    ``device`` ("cpu", "cuda", "cuda:1") and ``dtype`` ("float32", "bfloat16", "float16",
    "auto") apply when loading. ``max_batch_size`` caps rows per forward pass;
    ``max_context`` (default: the model's ``max_position_embeddings``) caps prompt+output.
    Thread-safe: calls are serialised by a lock (wrap in :class:`BatchingEngine` to merge
    concurrent callers into one batch).
    """

    name = "hf"

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
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        if isinstance(model, str):
            torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
            kwargs: dict[str, Any] = {"dtype": torch_dtype}
            if attn_implementation:
                kwargs["attn_implementation"] = attn_implementation
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model, **kwargs)
        elif dtype != "auto":
            model = model.to(getattr(torch, dtype))
        if tokenizer is None:
            raise ValueError("pass the tokenizer together with a model object")
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
        self._lock = threading.Lock()

    # -- public -------------------------------------------------------------------------
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]:
        results: list[Completion] = []
        with self._lock:
            for start in range(0, len(requests), self.max_batch_size):
                chunk = requests[start : start + self.max_batch_size]
                try:
                    results.extend(self._generate_batch(chunk, params))
                except Exception as exc:  # a broken batch fails its requests, not the run
                    kind = EngineErrorKind.INTERNAL
                    results.extend(Completion.failure(kind, f"{type(exc).__name__}: {exc}")
                                   for _ in chunk)
        return results

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    # -- internals ----------------------------------------------------------------------
    def _prompt_ids(self, request: GenerationRequest) -> list[int]:
        if request.token_ids:
            return list(request.token_ids)
        return self.encode(request.text)

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], default: SamplingParams
    ) -> list[Completion]:
        params = [r.params or default for r in requests]
        prompts = [self._prompt_ids(r) for r in requests]
        out: list[Completion | None] = [None] * len(requests)
        rows: list[int] = []
        for i, ids in enumerate(prompts):
            if not ids:
                out[i] = Completion.failure(EngineErrorKind.BAD_RESPONSE, "empty prompt")
            elif len(ids) >= self.max_context:
                out[i] = Completion.failure(
                    EngineErrorKind.CONTEXT_OVERFLOW,
                    f"prompt has {len(ids)} tokens; the context limit is {self.max_context}",
                )
            else:
                rows.append(i)
        if rows:
            sampled = self._sample([prompts[i] for i in rows], [params[i] for i in rows],
                                   [requests[i].on_token for i in rows])
            for i, completion in zip(rows, sampled, strict=True):
                out[i] = completion
        assert all(c is not None for c in out)
        return out  # type: ignore[return-value]

    def _sample(self, prompts: list[list[int]], params: list[SamplingParams],
                callbacks: list[Any]) -> list[Completion]:
        torch = self.torch
        from transformers import DynamicCache

        n = len(prompts)
        device = self.model.device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids)
            mask[row, width - len(ids):] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        budgets = [min(p.max_new_tokens, self.max_context - len(ids))
                   for p, ids in zip(params, prompts, strict=True)]
        # Private generators (on CPU: cheap and device-independent) make a request's draws
        # independent of its batch-mates; unseeded requests draw a seed from torch's RNG.
        generators = []
        for p in params:
            seed = p.seed if p.seed is not None else int(torch.randint(0, 2**62, (1,)).item())
            generators.append(torch.Generator().manual_seed(seed))
        temperature = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params],
                                   device=device).unsqueeze(1)
        greedy = torch.tensor([p.temperature == 0 for p in params], device=device)
        top_p = torch.tensor([p.top_p for p in params], device=device).unsqueeze(1)
        top_k = torch.tensor([p.top_k or 0 for p in params], device=device)
        max_stop = [max((len(s) for s in p.stop), default=0) + 1 for p in params]

        generated: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        stop_hit: list[str | None] = [None] * n
        cache = DynamicCache()
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            output = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                                past_key_values=cache, use_cache=True, logits_to_keep=1)
            for _step in range(max(budgets)):
                logits = output.logits[:, -1, :].float()
                tokens, token_logprobs = self._pick(logits, temperature, greedy, top_p, top_k,
                                                    generators)
                for row in range(n):
                    if finish[row] is not None:
                        continue
                    token = int(tokens[row])
                    generated[row].append(token)
                    logprobs[row].append(float(token_logprobs[row]))
                    if callbacks[row] is not None:
                        try:
                            callbacks[row](token, logprobs[row][-1])
                        except Exception:  # a gone stream listener must not stop the batch
                            callbacks[row] = None
                    if token in self.eos_ids:
                        finish[row] = "eos"
                        continue
                    if params[row].stop:
                        tail = self.tokenizer.decode(generated[row][-max_stop[row]:],
                                                     skip_special_tokens=False)
                        hit = find_stop(tail, params[row].stop)
                        if hit is not None:
                            finish[row], stop_hit[row] = "stop", hit[1]
                            continue
                    if len(generated[row]) >= budgets[row]:
                        finish[row] = "length"
                if all(f is not None for f in finish):
                    break
                next_tokens = torch.tensor(
                    [g[-1] if finish[r] is None else self.pad_id for r, g in enumerate(generated)],
                    device=device).unsqueeze(1)
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], 1)
                position_ids = position_ids[:, -1:] + 1
                output = self.model(input_ids=next_tokens, attention_mask=mask,
                                    position_ids=position_ids, past_key_values=cache,
                                    use_cache=True)
        results = []
        for row in range(n):
            text = self.tokenizer.decode(generated[row], skip_special_tokens=False)
            results.append(Completion(
                text=text,
                token_ids=tuple(generated[row]),
                logprobs=tuple(logprobs[row]),
                finish_reason=finish[row] or "length",  # type: ignore[arg-type]
                stop_string=stop_hit[row],
                eos_text=self.eos_text,
                usage={"prompt_tokens": len(prompts[row]), "completion_tokens": len(generated[row])},
            ))
        return results

    def _pick(self, logits: Any, temperature: Any, greedy: Any, top_p: Any, top_k: Any,
              generators: list[Any]) -> tuple[Any, Any]:
        """Sample one token per row; return (tokens, logprob of each under logits/T)."""
        torch = self.torch
        scaled = logits / temperature
        logp = torch.log_softmax(scaled, dim=-1)
        sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
        probs = sorted_logp.exp()
        cumulative = probs.cumsum(-1)
        keep = (cumulative - probs) < top_p  # nucleus: always keeps the top token
        ranks = torch.arange(probs.shape[-1], device=probs.device).unsqueeze(0)
        keep &= (top_k.unsqueeze(1) <= 0) | (ranks < top_k.unsqueeze(1))
        probs = probs * keep
        cdf = probs.cumsum(-1)
        draws = torch.cat([torch.rand(1, generator=g) for g in generators]).to(probs.device)
        target = (draws * cdf[:, -1]).unsqueeze(1)
        index = torch.searchsorted(cdf, target, right=True).clamp(max=probs.shape[-1] - 1)
        sampled = order.gather(1, index).squeeze(1)
        tokens = torch.where(greedy, order[:, 0], sampled)
        return tokens.cpu(), logp.gather(1, tokens.to(logp.device).unsqueeze(1)).squeeze(1).cpu()

"""Per-request decoding state and batched token picking for the ``hf`` engine.

:class:`RowState` is one request while it decodes: its prompt ids, sampling settings, private
random generator, token budget and what it has sampled so far; :meth:`RowState.accept`
applies the engine's stopping rules to one sampled token. :func:`pick_tokens` samples one
token for every row of a batch at once.

Why rows own their randomness: a request must sample the same tokens whichever other
requests share its batch (RL reproducibility, tests), so each row draws its uniform from a
private CPU generator seeded by the request, and every operation that turns the draw into
a token is row-wise. Why no full-vocabulary sort unless a row asks for top-p: sorting
SmolLM2's 49,152 logits cost ~6 ms per row per step on this CPU (as much as a quarter of a
batched decode step), while inverting the unsorted CDF gives an equally exact sample.

Reported logprobs are ``log_softmax(logits / temperature)`` of the sampled token
(temperature 1 for greedy rows), i.e. before top-k/top-p filtering: the quantity trainers
recompute from a full forward pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.engines import Completion, SamplingParams, find_stop

__all__ = ["RowState", "pick_tokens"]


class RowState:
    """One request being decoded; ``deliver`` receives its :class:`Completion`."""

    __slots__ = ("budget", "cached_tokens", "cancel", "deliver", "finish", "generated", "generator",
                 "logprobs", "on_token", "params", "prompt_ids", "stop_hit", "stop_prefix",
                 "stop_window", "tops")

    def __init__(self, prompt_ids: list[int], params: SamplingParams, budget: int,
                 deliver: Callable[[Completion], None],
                 on_token: Callable[[int, float], None] | None,
                 resume_ids: tuple[int, ...] | list[int] = (), cancel: Any = None) -> None:
        import torch

        self.prompt_ids = prompt_ids
        self.params = params
        self.budget = budget
        self.deliver = deliver
        self.on_token = on_token
        self.cancel = cancel  # a threading.Event: set when the caller no longer wants the reply
        # Unseeded requests draw a seed from torch's global RNG (reproducible under
        # torch.manual_seed, independent of batch-mates either way).
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        self.generator = torch.Generator().manual_seed(seed)
        self.stop_window = max((len(s) for s in params.stop), default=0) + 1
        # a resumed turn's earlier ids: a stop string may straddle the interruption
        self.stop_prefix = list(resume_ids)[-self.stop_window:]
        self.generated: list[int] = []
        self.logprobs: list[float] = []
        self.tops: list[tuple[tuple[int, float], ...]] = []  # params.top_logprobs alternatives per step
        self.finish: str | None = None
        self.stop_hit: str | None = None
        self.cached_tokens = 0  # prompt tokens whose keys/values were reused, not recomputed

    @property
    def fed_ids(self) -> list[int]:
        """The ids whose keys/values the model holds: prompt and all but the last sampled id."""
        return self.prompt_ids + self.generated[:-1]

    def accept(self, token: int, logprob: float, tokenizer: Any, eos_ids: frozenset[int],
               top: tuple[tuple[int, float], ...] = ()) -> bool:
        """Record one sampled token; True when the row is finished (eos, stop, length, or
        ``abort`` once its caller cancelled it).

        The stop string is searched in the decoded tail of the sampled ids, so a stop split
        across tokens (or ending inside a merged token) is caught; the ids themselves are
        never re-tokenised or trimmed.
        """
        self.generated.append(token)
        self.logprobs.append(logprob)
        if self.params.top_logprobs:
            self.tops.append(top)
        if self.on_token is not None:
            try:
                if self.params.top_logprobs:
                    self.on_token(token, logprob, top)  # type: ignore[call-arg]
                else:
                    self.on_token(token, logprob)
            except Exception:  # a gone stream listener must not stop the batch
                self.on_token = None
        # A reply that ended by itself on this token is finished, cancelled or not: ``abort``
        # (nobody reads the rest: free the row) says the text was cut, and a recorder takes it so.
        if token in eos_ids:
            self.finish = "eos"
        elif self.params.stop and (hit := find_stop(
                tokenizer.decode(self._stop_tail(), skip_special_tokens=False),
                self.params.stop)) is not None:
            self.finish, self.stop_hit = "stop", hit[1]
        elif len(self.generated) >= self.budget:
            self.finish = "length"
        elif self.cancel is not None and self.cancel.is_set():
            self.finish = "abort"
        return self.finish is not None

    def _stop_tail(self) -> list[int]:
        tail = self.generated[-self.stop_window:]
        if self.stop_prefix and len(tail) < self.stop_window:
            tail = (self.stop_prefix + tail)[-self.stop_window:]
        return tail

    def completion(self, tokenizer: Any, eos_text: str) -> Completion:
        return Completion(
            text=tokenizer.decode(self.generated, skip_special_tokens=False),
            token_ids=tuple(self.generated),
            logprobs=tuple(self.logprobs),
            finish_reason=self.finish or "length",  # type: ignore[arg-type]
            stop_string=self.stop_hit,
            eos_text=eos_text,
            top_logprobs=tuple(self.tops),
            usage={"prompt_tokens": len(self.prompt_ids),
                   "completion_tokens": len(self.generated),
                   "cached_tokens": self.cached_tokens},
        )


def pick_tokens(logits: Any, rows: list[RowState]
                ) -> tuple[list[int], list[float], list[tuple[tuple[int, float], ...]]]:
    """One token per row from ``logits`` [rows, vocab]; returns (tokens, their logprobs, each
    row's ``top_logprobs`` most likely (token, logprob) pairs: empty where it asked for none).

    Greedy rows (temperature 0) take the argmax; sampling rows invert the CDF of their
    (top-k/top-p filtered) distribution at their private uniform draw.
    """
    import torch

    device = logits.device
    logits = logits.float()
    temperature = torch.tensor([r.params.temperature or 1.0 for r in rows],
                               device=device).unsqueeze(1)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    tokens = logp.argmax(dim=-1)
    sampling = [i for i, r in enumerate(rows) if r.params.temperature > 0]
    if sampling:
        draws = torch.cat([torch.rand(1, generator=rows[i].generator) for i in sampling])
        plain = [j for j, i in enumerate(sampling)
                 if rows[i].params.top_p >= 1 and not rows[i].params.top_k]
        plain_set = set(plain)
        filtered = [j for j in range(len(sampling)) if j not in plain_set]
        if plain:
            index = torch.tensor([sampling[j] for j in plain], device=device)
            probs = logp.index_select(0, index).exp()
            tokens[index] = _invert_cdf(probs, draws[plain].to(device))
        if filtered:
            index = torch.tensor([sampling[j] for j in filtered], device=device)
            tokens[index] = _filtered_sample([rows[sampling[j]] for j in filtered],
                                             logp.index_select(0, index),
                                             draws[filtered].to(device))
    chosen = logp.gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens.tolist(), chosen.tolist(), _top_pairs(logp, rows)


def _top_pairs(logp: Any, rows: list[RowState]) -> list[tuple[tuple[int, float], ...]]:
    """The most likely tokens of the rows that ask for them (one ``topk`` for all of them)."""
    widest = max(r.params.top_logprobs for r in rows)
    if not widest:
        return [()] * len(rows)
    values, indices = logp.topk(min(widest, logp.shape[-1]), dim=-1)
    values, indices = values.tolist(), indices.tolist()
    return [tuple(zip(indices[i][:r.params.top_logprobs], values[i][:r.params.top_logprobs], strict=True))
            for i, r in enumerate(rows)]


def _invert_cdf(probs: Any, draws: Any) -> Any:
    """Index where each row's running sum first exceeds ``draw * total``."""
    import torch

    cdf = probs.cumsum(-1)
    target = (draws * cdf[:, -1]).unsqueeze(1)
    return torch.searchsorted(cdf, target, right=True).clamp(max=probs.shape[-1] - 1).squeeze(1)


def _filtered_sample(rows: list[RowState], logp: Any, draws: Any) -> Any:
    """Top-k then nucleus (top-p) filtering on the sorted distribution, then inversion."""
    import torch

    top_p = torch.tensor([r.params.top_p for r in rows], device=logp.device).unsqueeze(1)
    top_k = torch.tensor([r.params.top_k or 0 for r in rows], device=logp.device).unsqueeze(1)
    sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
    probs = sorted_logp.exp()
    keep = (probs.cumsum(-1) - probs) < top_p  # nucleus: always keeps the top token
    ranks = torch.arange(probs.shape[-1], device=logp.device).unsqueeze(0)
    keep &= (top_k <= 0) | (ranks < top_k)
    index = _invert_cdf(probs * keep, draws)
    return order.gather(1, index.unsqueeze(1)).squeeze(1)

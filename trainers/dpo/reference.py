"""The reference side of DPO: sequence log-probs of each pair under the frozen start model.

Two ways, one answer (``dpo.reference``):

* ``precompute``: before the first update, score every pair once (the policy *is* the
  reference then, so no second model is loaded unless ``dpo.reference_path`` names one);
  the numbers live in memory and in every checkpoint (``reference_logps.json``), so a
  resumed run never needs the start weights again;
* ``frozen``: a second, gradient-free model scores each row as it is trained (a LoRA policy
  scores with its adapter switched off instead). Costs a forward per row and the memory of
  a model; useful when the pairs change between runs or do not fit a pre-pass.

Also where a row is scored: :func:`score_row` runs one forward over a packed row and sums
each sample's generated-token log-probs (``trainers.common.packed.token_logps`` gives 0 to
every position without a target, so prompt and observation tokens add nothing).
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.common.loading import load_packed_model
from trainers.common.lora import LoraSection
from trainers.common.packed import token_logps
from trainers.data import IGNORE_INDEX, pack_to_batch
from trainers.dpo.loss import segment_sums

if TYPE_CHECKING:
    from trainers.dpo.config import DPOConfig
    from trainers.dpo.data import PairRow

__all__ = ["REFERENCE_FILE", "Reference", "disable_dropout", "score_row", "trained_counts"]

REFERENCE_FILE = "reference_logps.json"


def disable_dropout(model: Any) -> None:
    """Zero every dropout probability (``nn.Dropout`` modules and attention dropout)."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def trained_counts(row: PairRow) -> list[int]:
    """Generated tokens scored per sample of the row (targets that are not ignored)."""
    counts, start = [], 0
    for length in row.pack.seq_lens:
        counts.append(sum(1 for t in row.pack.targets[start:start + length] if t != IGNORE_INDEX))
        start += length
    return counts


def score_row(model: Any, row: PairRow, device: Any, chunked: bool) -> tuple[Any, Any]:
    """``(chosen, rejected)``: each pair's summed log-prob of its generated tokens, ``[N]``."""
    import torch

    values = token_logps(model, pack_to_batch(row.pack, device), chunked)
    sums = segment_sums(values, row.pack.seq_lens)
    return (sums[torch.tensor(row.chosen_at, device=values.device)],
            sums[torch.tensor(row.rejected_at, device=values.device)])


class Reference:
    """Reference log-probs per row, by whichever ``dpo.reference`` mode is configured."""

    def __init__(self, config: DPOConfig, policy: Any, tokenizer: Any, device: Any) -> None:
        self.config = config
        self.policy = policy
        self.device = device
        self.chunked = config.optim.chunked_loss
        self.logps: dict[str, tuple[float, float]] = {}
        self.model: Any = None
        if config.dpo.reference == "frozen" and not self._uses_adapter:
            self.model = self._load(tokenizer)

    @property
    def _uses_adapter(self) -> bool:
        return self.config.model.lora.enabled and not self.config.dpo.reference_path

    def _load(self, tokenizer: Any) -> Any:
        """The start model (or ``reference_path``), gradient-free, dropout off."""
        spec = self.config.model
        if self.config.dpo.reference_path:
            spec = dataclasses.replace(spec, path=self.config.dpo.reference_path)
        spec = dataclasses.replace(spec, lora=LoraSection(), gradient_checkpointing=False)
        model = load_packed_model(self.config, tokenizer, spec=spec).to(self.device)
        disable_dropout(model)
        return model.eval().requires_grad_(False)

    def _scope(self) -> Any:
        """Scoring with the policy itself as reference: its LoRA adapter off, when it has one."""
        if self._uses_adapter and hasattr(self.policy, "disable_adapter"):
            return self.policy.disable_adapter()
        return nullcontext()

    def _forward(self, row: PairRow, model: Any) -> tuple[Any, Any]:
        import torch

        with torch.no_grad(), self._scope():
            return score_row(model, row, self.device, self.chunked)

    # -- precompute ------------------------------------------------------------------
    def precompute(self, rows: list[PairRow] | tuple[PairRow, ...], tokenizer: Any) -> None:
        """Score ``rows`` once with the start model (before any update)."""
        model = self._load(tokenizer) if self.config.dpo.reference_path else self.policy
        was_training = model.training
        model.eval()
        for row in rows:
            chosen, rejected = self._forward(row, model)
            for pid, c, r in zip(row.pair_ids, chosen.tolist(), rejected.tolist(), strict=True):
                self.logps[pid] = (c, r)
        model.train(was_training)

    def save(self, directory: Path) -> None:
        if self.logps:
            (directory / REFERENCE_FILE).write_text(json.dumps(self.logps), encoding="utf-8")

    def load(self, directory: Path) -> None:
        path = directory / REFERENCE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{directory} holds no {REFERENCE_FILE} (it was written "
                                    "with dpo.reference=frozen): resume with that setting")
        data = json.loads(path.read_text(encoding="utf-8"))
        self.logps = {pid: (float(c), float(r)) for pid, (c, r) in data.items()}

    def missing(self, rows: list[PairRow] | tuple[PairRow, ...]) -> list[PairRow]:
        return [row for row in rows if any(pid not in self.logps for pid in row.pair_ids)]

    # -- per row ---------------------------------------------------------------------
    def row(self, row: PairRow) -> tuple[Any, Any]:
        """``(chosen, rejected)`` reference log-prob sums of the row's pairs (no grad)."""
        import torch

        if self.config.dpo.reference == "frozen":
            return self._forward(row, self.model if self.model is not None else self.policy)
        values = [self.logps[pid] for pid in row.pair_ids]
        tensor = torch.tensor(values, dtype=torch.float32, device=self.device)
        return tensor[:, 0], tensor[:, 1]

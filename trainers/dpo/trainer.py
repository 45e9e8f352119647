"""Masked DPO on CoA preference pairs: log-probs of generated tokens only, packed rows, resumable.

Read top to bottom: config (:class:`~trainers.dpo.config.DPOConfig`) -> pairs (``coa pairs``
output, :mod:`trainers.dpo.pairs`) -> rows (both sides tokenised span by span and packed,
:mod:`trainers.dpo.data`) -> model (the shared loader, :mod:`trainers.common.loading`) ->
reference log-probs (:mod:`trainers.dpo.reference`) -> the loop -> checkpoints
(:class:`~trainers.common.supervised.SupervisedRun`).

The loss of an optimiser step is the mean over the step's pairs of the per-pair loss
(:mod:`trainers.dpo.loss`), whatever rows they were packed into: each row contributes its
summed pair losses divided by the step's pair count. A step is ``optim.grad_accum`` rows.
One process (CPU or one GPU): the SFT trainer's DDP/DeepSpeed paths are not wired here.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.common.checkpoint import TrainerPosition
from trainers.common.loading import load_packed_model, load_tokenizer
from trainers.common.supervised import SupervisedResult, SupervisedRun, run_supervised
from trainers.data import epoch_order, split_eval
from trainers.dpo.config import DPOConfig, load_config
from trainers.dpo.data import PairDataError, PairRow, PreparedPairs, pair_samples, prepare_pair_rows
from trainers.dpo.loss import preference_loss
from trainers.dpo.pairs import PreferencePair, read_pairs
from trainers.dpo.reference import Reference, disable_dropout, score_row, trained_counts

__all__ = ["DPOConfig", "DPOResult", "load_config", "train"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


@dataclass(frozen=True, slots=True)
class DPOResult(SupervisedResult):
    """What a run produced; per-step series are the logged values of every step."""

    reward_margins: tuple[float, ...]
    """Mean of beta * ((pi_c - ref_c) - (pi_r - ref_r)) over each step's pairs."""
    logp_margins: tuple[float, ...]
    """Mean policy log-prob of chosen minus rejected (generated tokens) per step."""
    accuracies: tuple[float, ...]
    eval_metrics: tuple[tuple[int, dict[str, float]], ...]
    data_summary: str
    tokens_per_s: float
    halted: bool


def _device(preference: str) -> Any:
    import torch

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise RuntimeError("the DPO trainer runs in one process; launch it without "
                           "torchrun/accelerate (WORLD_SIZE > 1)")
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(preference)


def _load_pairs(config: DPOConfig) -> tuple[list[PreferencePair], list[PreferencePair]]:
    spec = config.data
    pairs = read_pairs(spec.train_path)
    if spec.eval_path:
        return pairs, read_pairs(spec.eval_path)
    return split_eval(pairs, spec.eval_fraction, config.bookkeeping.seed)


def _tokenizer(config: DPOConfig, pairs: list[PreferencePair],
               checkpoint: Path | None) -> tuple[Any, str]:
    """The tokenizer and, when there is none, why (for the message of a pair that needs one)."""
    from transformers import AutoTokenizer

    if checkpoint is not None and any((checkpoint / f).is_file() for f in _TOKENIZER_FILES):
        return AutoTokenizer.from_pretrained(checkpoint), ""
    if config.model.path == "tiny":
        texts = [t for pair in pairs for side in pair_samples(pair, text_only=True)
                 for t in side.texts()]
        return load_tokenizer(config.model, texts), ""
    name = config.model.tokenizer or config.model.path
    try:
        return load_tokenizer(config.model), ""
    except (OSError, ValueError, TypeError) as error:
        return None, f"loading a tokenizer from {name} failed: {str(error).splitlines()[0]}"


def _prepare(config: DPOConfig, pairs: list[PreferencePair], tokenizer: Any, note: str,
             truncation: str) -> PreparedPairs:
    spec = config.data
    return prepare_pair_rows(pairs, tokenizer, max_seq_len=spec.max_seq_len,
                             truncation=truncation, pack_len=int(spec.pack_len or 0),
                             packing=spec.packing, text_only=config.model.path == "tiny",
                             tokenizer_note=note)


def _check_vocab(rows: tuple[PairRow, ...], model: Any) -> None:
    vocab = model.get_input_embeddings().num_embeddings
    top = max((max(row.pack.input_ids) for row in rows), default=0)
    if top >= vocab:
        raise PairDataError(f"a pair holds token id {top} but the model's vocabulary has {vocab} "
                            "entries: the pairs were sampled by a model with another tokenizer; "
                            "train the model that sampled them (or its SFT'd parent)")


class _Scorer:
    """Per-row losses and the sums the metrics are averaged from."""

    def __init__(self, config: DPOConfig, reference: Reference, device: Any) -> None:
        self.config, self.reference, self.device = config, reference, device
        self.totals: dict[str, float] = {}

    def loss(self, model: Any, row: PairRow) -> Any:
        """Summed per-pair loss of ``row`` (with grad when grad is on); adds to ``totals``."""
        import torch

        dpo = self.config.dpo
        chosen, rejected = score_row(model, row, self.device, self.config.optim.chunked_loss)
        ref_chosen, ref_rejected = self.reference.row(row)
        raw = (chosen.detach(), rejected.detach())
        if dpo.loss_type == "ipo":  # IPO compares per-token means
            counts = torch.tensor(trained_counts(row), dtype=torch.float32, device=chosen.device)
            c_len = counts[list(row.chosen_at)]
            r_len = counts[list(row.rejected_at)]
            chosen, rejected = chosen / c_len, rejected / r_len
            ref_chosen, ref_rejected = ref_chosen / c_len, ref_rejected / r_len
        out = preference_loss(chosen, rejected, ref_chosen, ref_rejected, beta=dpo.beta,
                              loss_type=dpo.loss_type, label_smoothing=dpo.label_smoothing)
        for key, value in (("loss", out.losses.detach()),
                           ("rewards/chosen", out.chosen_rewards),
                           ("rewards/rejected", out.rejected_rewards),
                           ("rewards/margin", out.chosen_rewards - out.rejected_rewards),
                           ("rewards/accuracy", (out.chosen_rewards > out.rejected_rewards).float()),
                           ("logps/chosen", raw[0]), ("logps/rejected", raw[1]),
                           ("logps/margin", raw[0] - raw[1])):
            self.totals[key] = self.totals.get(key, 0.0) + float(value.sum())
        self.totals["pairs"] = self.totals.get("pairs", 0.0) + row.num_pairs
        return out.losses.sum()

    def take(self) -> dict[str, float]:
        """Means over the pairs scored since the last call."""
        pairs = max(self.totals.pop("pairs", 0.0), 1.0)
        means = {key: value / pairs for key, value in self.totals.items()}
        means["pairs"] = pairs
        self.totals = {}
        return means


def _evaluate(model: Any, scorer: _Scorer, rows: tuple[PairRow, ...], autocast: Any
              ) -> dict[str, float]:
    import torch

    model.eval()
    with torch.no_grad(), autocast():
        for row in rows:
            scorer.loss(model, row)
    model.train()
    return {f"eval/{key}": value for key, value in scorer.take().items()}


def train(config: DPOConfig) -> DPOResult:
    """Run (or resume) a DPO run; returns the per-step series and where the model went."""
    return run_supervised(config, _DPORun)


class _DPORun:
    """One run: pairs, model and reference log-probs are set up on construction, :meth:`train` loops."""

    def __init__(self, config: DPOConfig) -> None:
        self.config = config
        self.device = _device(config.resources.device)
        self.book = SupervisedRun(config, label="dpo")
        self._load_pairs_and_model()
        self.reference_s = self._prepare_reference()
        optim = config.optim
        self.total_steps = optim.max_steps or math.ceil(len(self.data.rows) / optim.grad_accum) * optim.num_epochs
        self.book.optimise(self.model, self.device, self.total_steps)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.scorer = _Scorer(config, self.reference, self.device)
        self.book.begin(self.total_steps)  # last: nothing above may draw from the restored streams

    def _load_pairs_and_model(self) -> None:
        config, spec = self.config, self.config.data
        train_pairs, eval_pairs = _load_pairs(config)
        self.tokenizer, note = _tokenizer(config, train_pairs + eval_pairs, self.book.checkpoint)
        self.data = _prepare(config, train_pairs, self.tokenizer, note, spec.truncation)
        self.eval_data = _prepare(config, eval_pairs, self.tokenizer, note, "drop")
        print(f"[dpo] train pairs: {self.data.summary()}", flush=True)
        if not self.data.rows:
            raise PairDataError(f"no pair of {spec.train_path} survived the length policy "
                                f"({self.data.summary()}); raise data.max_seq_len")
        self.model = load_packed_model(config, self.tokenizer, source=self.book.source).to(self.device)
        if config.dpo.disable_dropout:
            disable_dropout(self.model)
        _check_vocab(self.data.rows + self.eval_data.rows, self.model)

    def _prepare_reference(self) -> float:
        """The reference log-probs (from the checkpoint, then computed for what is missing);
        returns the seconds their computation took."""
        self.reference = Reference(self.config, self.model, self.tokenizer, self.device)
        if self.config.dpo.reference != "precompute":
            return 0.0
        rows, checkpoint = self.data.rows + self.eval_data.rows, self.book.checkpoint
        if checkpoint is not None:  # the policy has moved on: the start scores come from disk
            self.reference.load(checkpoint)
            if self.reference.missing(rows):
                raise PairDataError(f"{checkpoint} has no reference log-probs for some pairs "
                                    "(the pairs file changed since the run started?); resume "
                                    "with the original pairs or start a new run")
        started = time.perf_counter()
        with self.autocast():
            self.reference.precompute(self.reference.missing(rows), self.tokenizer)
        return time.perf_counter() - started

    def autocast(self) -> Any:
        import torch

        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.optim.precision == "bf16")

    def _evaluate(self, step: int, **extra: float) -> None:
        self.eval_metrics.append((step, _evaluate(self.model, self.scorer, self.eval_data.rows, self.autocast)))
        assert self.book.logger is not None
        self.book.logger.log(step, {**self.eval_metrics[-1][1], **extra})

    def train(self) -> DPOResult:
        book, position = self.config.bookkeeping, self.book.position
        self.series: dict[str, list[float]] = {"loss": [], "rewards/margin": [], "logps/margin": [],
                                               "rewards/accuracy": []}
        self.eval_metrics: list[tuple[int, dict[str, float]]] = []
        self.started, self.tokens_seen, halted = time.perf_counter(), 0, False
        epoch, rows_done = position.epoch, position.rows_in_epoch
        if self.eval_data.rows and book.eval_every and position.step == 0:
            self._evaluate(0, reference_s=self.reference_s)
        order = epoch_order(len(self.data.rows), book.seed, epoch)
        while self.book.position.step < self.total_steps:
            if rows_done >= len(self.data.rows):
                epoch, rows_done = epoch + 1, 0
                order = epoch_order(len(self.data.rows), book.seed, epoch)
            rows = [self.data.rows[i] for i in order[rows_done:rows_done + self.config.optim.grad_accum]]
            grad_norm = self._step(rows)
            rows_done += len(rows)
            self.book.position = TrainerPosition(self.book.position.step + 1, epoch, rows_done)
            self._log(grad_norm, epoch)
            if self.eval_data.rows and self.book.due(book.eval_every):
                self._evaluate(self.book.position.step)
            halted = self.book.halted
            if self.book.due(book.save_every) or halted:
                self.book.save(self.model, self.tokenizer, write=self.reference.save)
            if halted:
                break
        return self._finish(halted)

    def _step(self, rows: list[PairRow]) -> float:
        """One optimiser step over ``rows`` (each pair weighs the same); its gradient norm."""
        import torch

        step_pairs = sum(row.num_pairs for row in rows)
        for row in rows:
            with self.autocast():
                loss = self.scorer.loss(self.model, row) / step_pairs
            loss.backward()
            self.tokens_seen += len(row.pack)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, self.config.optim.max_grad_norm))
        self.book.step_optimizer()
        return grad_norm

    def _log(self, grad_norm: float, epoch: int) -> None:
        metrics = self.scorer.take()
        for key, values in self.series.items():
            values.append(metrics[key])
        elapsed = time.perf_counter() - self.started
        tokens_per_s = self.tokens_seen / max(elapsed, 1e-9)
        self.book.log({**metrics, "epoch": epoch, "grad_norm": grad_norm, "tokens_per_s": tokens_per_s,
                       "tokens": self.tokens_seen, "elapsed_s": elapsed},
                      loss=metrics["loss"], tokens_per_s=tokens_per_s, total_steps=self.total_steps)

    def _finish(self, halted: bool) -> DPOResult:
        step, final_dir = self.book.position.step, None
        if not halted:
            if self.eval_data.rows and (not self.eval_metrics or self.eval_metrics[-1][0] != step):
                self._evaluate(step)
            final_dir = self.book.save_final(self.model, self.tokenizer)
        self.book.close()
        elapsed = time.perf_counter() - self.started
        series = self.series
        return DPOResult(self.book.output_dir, final_dir, step, tuple(series["loss"]),
                         tuple(series["rewards/margin"]), tuple(series["logps/margin"]),
                         tuple(series["rewards/accuracy"]), tuple(self.eval_metrics), self.data.summary(),
                         self.tokens_seen / max(elapsed, 1e-9), halted)

"""Masked DPO on CoA preference pairs: log-probs of generated tokens only, packed rows, resumable.

Read top to bottom: config (:class:`~trainers.dpo.config.DPOConfig`) -> pairs (``coa pairs``
output, :mod:`trainers.dpo.pairs`) -> rows (both sides tokenised span by span and packed,
:mod:`trainers.dpo.data`) -> model (the SFT trainer's loader) -> reference log-probs
(:mod:`trainers.dpo.reference`) -> the loop -> checkpoints (the shared Checkpointer).

The loss of an optimiser step is the mean over the step's pairs of the per-pair loss
(:mod:`trainers.dpo.loss`), whatever rows they were packed into: each row contributes its
summed pair losses divided by the step's pair count. A step is ``optim.grad_accum`` rows.
One process (CPU or one GPU): the SFT trainer's DDP/DeepSpeed paths are not wired here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.common import Checkpointer, MetricsLogger
from trainers.common.threads import torch_threads
from trainers.data import epoch_order, split_eval
from trainers.dpo.config import DPOConfig, load_config
from trainers.dpo.data import PairDataError, PairRow, PreparedPairs, pair_samples, prepare_pair_rows
from trainers.dpo.loss import preference_loss
from trainers.dpo.pairs import PreferencePair, read_pairs
from trainers.dpo.reference import Reference, disable_dropout, score_row, trained_counts
from trainers.sft.model import load_model, load_tokenizer, save_for_inference
from trainers.sft.progress import ProgressBar
from trainers.sft.trainer import TrainerPosition, make_optimizer

__all__ = ["DPOConfig", "DPOResult", "load_config", "train"]

_OPTIMIZER_FILE = "optimizer.pt"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


@dataclass(frozen=True, slots=True)
class DPOResult:
    """What a run produced; per-step series are the logged values of every step."""

    output_dir: Path
    final_dir: Path | None
    steps: int
    losses: tuple[float, ...]
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
        return load_tokenizer(config, texts), ""  # type: ignore[arg-type]  # same sections
    name = config.model.tokenizer or config.model.path
    try:
        return load_tokenizer(config), ""  # type: ignore[arg-type]
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
    with torch_threads(config.resources.torch_threads):
        return _train(config)


def _train(config: DPOConfig) -> DPOResult:
    import torch
    from transformers import get_cosine_schedule_with_warmup

    spec, optim, book = config.data, config.optim, config.bookkeeping
    device = _device(config.resources.device)
    output_dir = Path(book.output_dir)
    checkpoints = Checkpointer(output_dir, keep=book.keep_checkpoints)
    checkpoint = checkpoints.resolve(book.resume)

    # -- pairs, tokenizer, model --------------------------------------------------------
    train_pairs, eval_pairs = _load_pairs(config)
    tokenizer, note = _tokenizer(config, train_pairs + eval_pairs, checkpoint)
    data = _prepare(config, train_pairs, tokenizer, note, spec.truncation)
    eval_data = _prepare(config, eval_pairs, tokenizer, note, "drop")
    print(f"[dpo] train pairs: {data.summary()}", flush=True)
    if not data.rows:
        raise PairDataError(f"no pair of {spec.train_path} survived the length policy "
                            f"({data.summary()}); raise data.max_seq_len")
    source = str(checkpoint) if checkpoint else None
    model = load_model(config, tokenizer, source=source).to(device)  # type: ignore[arg-type]
    if config.dpo.disable_dropout:
        disable_dropout(model)
    _check_vocab(data.rows + eval_data.rows, model)

    def autocast() -> Any:
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=optim.precision == "bf16")

    reference = Reference(config, model, tokenizer, device)
    reference_s = 0.0
    if config.dpo.reference == "precompute":
        if checkpoint is not None:  # the policy has moved on: the start scores come from disk
            reference.load(checkpoint)
            if reference.missing(data.rows + eval_data.rows):
                raise PairDataError(f"{checkpoint} has no reference log-probs for some pairs "
                                    "(the pairs file changed since the run started?); resume "
                                    "with the original pairs or start a new run")
        t0 = time.perf_counter()
        with autocast():
            reference.precompute(reference.missing(data.rows + eval_data.rows), tokenizer)
        reference_s = time.perf_counter() - t0

    # -- optimiser, schedule, position --------------------------------------------------
    steps_per_epoch = math.ceil(len(data.rows) / optim.grad_accum)
    total_steps = optim.max_steps or steps_per_epoch * optim.num_epochs
    warmup = optim.warmup_steps if optim.warmup_steps is not None else \
        int(optim.warmup_ratio * total_steps)
    optimizer = make_optimizer(config, model, device)  # type: ignore[arg-type]  # same sections
    scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, total_steps)
    position = TrainerPosition()
    if checkpoint is not None:
        position = TrainerPosition(**checkpoints.read_state(checkpoint)["position"])
        saved = torch.load(checkpoint / _OPTIMIZER_FILE, map_location="cpu", weights_only=False)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    scorer = _Scorer(config, reference, device)
    logger = MetricsLogger(output_dir, tensorboard=book.tensorboard, tag_prefix="dpo/",
                           resume_step=position.step if checkpoint is not None else None)
    progress = ProgressBar(enabled=book.progress, total_steps=total_steps,
                           initial_step=position.step, label="dpo")
    if checkpoint is not None:  # last: nothing above may draw from the restored streams
        checkpoints.restore_rng(checkpoint)

    def save(step: int) -> None:
        staging = checkpoints.staging(step)
        save_for_inference(model, tokenizer, staging, attention=config.model.attention)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                   staging / _OPTIMIZER_FILE)
        reference.save(staging)
        checkpoints.commit(step, {"position": dataclasses.asdict(position),
                                  "config": config.to_dict()})

    # -- the loop -----------------------------------------------------------------------
    series: dict[str, list[float]] = {"loss": [], "rewards/margin": [], "logps/margin": [],
                                      "rewards/accuracy": []}
    eval_metrics: list[tuple[int, dict[str, float]]] = []
    started, tokens_seen, halted = time.perf_counter(), 0, False
    epoch, rows_done = position.epoch, position.rows_in_epoch
    if eval_data.rows and book.eval_every and position.step == 0:
        eval_metrics.append((0, _evaluate(model, scorer, eval_data.rows, autocast)))
        logger.log(0, {**eval_metrics[-1][1], "reference_s": reference_s})
    order = epoch_order(len(data.rows), book.seed, epoch)
    while position.step < total_steps:
        if rows_done >= len(data.rows):
            epoch, rows_done = epoch + 1, 0
            order = epoch_order(len(data.rows), book.seed, epoch)
        rows = [data.rows[i] for i in order[rows_done:rows_done + optim.grad_accum]]
        step_pairs = sum(row.num_pairs for row in rows)
        for row in rows:
            with autocast():
                loss = scorer.loss(model, row) / step_pairs
            loss.backward()
            tokens_seen += len(row.pack)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, optim.max_grad_norm))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        rows_done += len(rows)
        position = TrainerPosition(position.step + 1, epoch, rows_done)
        metrics = scorer.take()
        for key, values in series.items():
            values.append(metrics[key])
        elapsed = time.perf_counter() - started
        tokens_per_s = tokens_seen / max(elapsed, 1e-9)
        if position.step % book.log_every == 0 or position.step == total_steps:
            logger.log(position.step, {**metrics, "epoch": epoch, "lr": scheduler.get_last_lr()[0],
                                       "grad_norm": grad_norm, "tokens_per_s": tokens_per_s,
                                       "tokens": tokens_seen, "elapsed_s": elapsed})
            progress.update(position.step, metrics["loss"], tokens_per_s)
        if eval_data.rows and book.eval_every and position.step % book.eval_every == 0:
            eval_metrics.append((position.step, _evaluate(model, scorer, eval_data.rows, autocast)))
            logger.log(position.step, eval_metrics[-1][1])
        halted = book.halt_at_step is not None and position.step >= book.halt_at_step
        if (book.save_every and position.step % book.save_every == 0) or halted:
            save(position.step)
        if halted:
            break

    final_dir = None
    if not halted:
        if eval_data.rows and (not eval_metrics or eval_metrics[-1][0] != position.step):
            eval_metrics.append((position.step, _evaluate(model, scorer, eval_data.rows, autocast)))
            logger.log(position.step, eval_metrics[-1][1])
        final_dir = output_dir / "final"
        save_for_inference(model, tokenizer, final_dir, attention=config.model.attention,
                           merge_lora=config.model.lora is not None
                           and config.model.merge_lora_on_save)
    logger.close()
    progress.close()
    elapsed = time.perf_counter() - started
    return DPOResult(output_dir, final_dir, position.step, tuple(series["loss"]),
                     tuple(series["rewards/margin"]), tuple(series["logps/margin"]),
                     tuple(series["rewards/accuracy"]), tuple(eval_metrics), data.summary(),
                     tokens_seen / max(elapsed, 1e-9), halted)

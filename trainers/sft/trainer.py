"""Masked SFT on CoA trajectories: loss only on model-generated tokens, packed rows, resumable.

Read top to bottom: config (``trainers.sft.config.SFTConfig``) -> data (tokenised span by span,
packed, :mod:`trainers.data`) -> model (:mod:`trainers.sft.model`) -> the loop -> checkpoints.

The loss of an optimiser step is the *token-level mean* cross-entropy over every trained token
of every packed row in that step (across gradient-accumulation micro-steps and across
processes): each row contributes its summed token loss divided by the step's total trained
token count. So a sample's weight is its number of trained tokens, whatever rows it lands in,
and packing or accumulation never changes the objective.

Multi-GPU: launch with ``torchrun``/``accelerate launch``; when ``WORLD_SIZE > 1`` each rank
takes every ``world``-th row of the epoch order and gradients are averaged by DDP (or by
DeepSpeed when ``deepspeed`` names a JSON config).
"""

from __future__ import annotations

import dataclasses
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.common.checkpoint import TrainerPosition
from trainers.common.loading import load_packed_model, load_tokenizer
from trainers.common.packed import loss_sum
from trainers.common.supervised import SupervisedResult, SupervisedRun, run_supervised
from trainers.data import (
    PreparedData,
    TruncationReport,
    epoch_order,
    pack_to_batch,
    prepare_packs,
)
from trainers.sft.config import SFTConfig, load_config
from trainers.sft.distributed import all_sum, barrier, deepspeed_engine, full_weights, init_dist
from trainers.sft.sources import MixedRows, load_sources

# TrainerPosition lives in trainers.common (SFT and DPO share it); importable here for one release.
__all__ = ["SFTConfig", "SFTResult", "TrainerPosition", "load_config", "train"]

@dataclass(frozen=True, slots=True)
class SFTResult(SupervisedResult):
    """What a run produced: the shared fields, then the eval losses and the data report."""

    eval_losses: tuple[tuple[int, float], ...]
    train_report: TruncationReport
    tokens_per_s: float
    halted: bool


def _make_loss_module(model: Any, chunked: bool) -> Any:
    import torch

    class CausalLMLoss(torch.nn.Module):
        """Wraps the model so DDP/DeepSpeed see one forward that returns the loss sum."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: dict[str, Any]) -> Any:
            return loss_sum(self.model, batch, chunked)

    return CausalLMLoss()


def _evaluate(module: Any, datas: list[tuple[str, PreparedData]], device: Any,
              autocast: Any) -> dict[str, float]:
    """Token-mean loss over every held-out row (``eval_loss``), and per env with a mixture
    (``eval_loss/<name>``)."""
    import torch

    module.eval()
    metrics: dict[str, float] = {}
    total, count = 0.0, 0
    with torch.no_grad(), autocast():
        for name, data in datas:
            part, tokens = 0.0, 0
            for pack in data.packs:
                part += float(module(pack_to_batch(pack, device)))
                tokens += pack.num_trained
            if name and data.packs:
                metrics[f"eval_loss/{name}"] = part / max(tokens, 1)
            total, count = total + part, count + tokens
    module.train()
    return {"eval_loss": total / max(count, 1), **metrics}


def _merged(reports: list[TruncationReport]) -> TruncationReport:
    return TruncationReport(*(sum(getattr(r, f.name) for r in reports)
                              for f in dataclasses.fields(TruncationReport)))


def train(config: SFTConfig) -> SFTResult:
    """Run (or resume) a masked SFT run; returns the losses and where the model went."""
    return run_supervised(config, _SFTRun)


class _SFTRun:
    """One run: the data, model and wrappers are set up on construction, :meth:`train` loops."""

    def __init__(self, config: SFTConfig) -> None:
        self.config = config
        self.dist, self.device = init_dist(config.resources.device, need_group=bool(config.resources.deepspeed))
        self.book = SupervisedRun(config, label="sft", main=self.dist.main)
        self.use_ds = bool(config.resources.deepspeed)
        self._load_data_and_model()
        self._plan()
        self._wrap()
        self.book.begin(self.total_steps)  # last: nothing above may draw from the restored streams

    # -- setup ------------------------------------------------------------------------
    def _load_data_and_model(self) -> None:
        config, spec, dist = self.config, self.config.data, self.dist
        self.sources = load_sources(config, dist.main, lambda: barrier(dist))
        texts = [t for source in self.sources for s in source.train for t in s.texts()]
        self.tokenizer = load_tokenizer(config.model, texts, source=self.book.source)
        self.model = load_packed_model(config, self.tokenizer, source=self.book.source).to(self.device)
        pack_len = config.effective_pack_len
        self.parts = [prepare_packs(source.train, self.tokenizer, max_seq_len=spec.max_seq_len,
                                    truncation=spec.truncation, pack_len=pack_len) for source in self.sources]
        self.eval_parts = [(source.name, prepare_packs(source.eval, self.tokenizer, max_seq_len=spec.max_seq_len,
                                                       truncation="truncate_right", pack_len=pack_len))
                           for source in self.sources]
        # One row list; with a mixture each env's rows are a contiguous block of it.
        self.data = PreparedData(tuple(p for part in self.parts for p in part.packs),
                                 _merged([part.report for part in self.parts]))
        self.source_of_row = [i for i, part in enumerate(self.parts) for _ in part.packs]
        self.has_eval = any(part.packs for _, part in self.eval_parts)
        if dist.main:
            for source, part in zip(self.sources, self.parts, strict=True):
                label = f" ({source.name})" if source.name else ""
                print(f"[sft] train data{label}: {part.report.summary()}", flush=True)

    def _plan(self) -> None:
        """Steps of the run, the optimiser and its schedule, and the mixture's row streams."""
        optim, dist, book = self.config.optim, self.dist, self.config.bookkeeping
        self.rows_per_rank = len(self.data.packs) // dist.world
        if self.rows_per_rank == 0:
            raise ValueError(f"{len(self.data.packs)} packed rows cannot feed {dist.world} processes")
        steps_per_epoch = (self.rows_per_rank // optim.grad_accum if self.use_ds
                           else math.ceil(self.rows_per_rank / optim.grad_accum))
        self.total_steps = optim.max_steps or steps_per_epoch * optim.num_epochs
        self.book.optimise(self.model, self.device, self.total_steps, saved_state=not self.use_ds)
        self.mixed = None
        if self.config.data.envs:
            offsets = [sum(len(p.packs) for p in self.parts[:i]) for i in range(len(self.parts))]
            self.mixed = MixedRows(self.config.data.envs, offsets, [len(p.packs) for p in self.parts], book.seed,
                                   dist.rank, dist.world, self.book.position.streams)

    def _wrap(self) -> None:
        """The loss module the loop calls, under DeepSpeed or DDP when the run has them."""
        import torch

        self.module = _make_loss_module(self.model, self.config.optim.chunked_loss)
        self.engine = None
        if self.use_ds:
            self.engine = deepspeed_engine(self.config, self.module, self.book.optimizer, self.book.scheduler)
            if self.book.checkpoint is not None:
                self.engine.load_checkpoint(str(self.book.checkpoint), tag="deepspeed")
            self.module = self.engine
        elif self.dist.world > 1:
            self.module = torch.nn.parallel.DistributedDataParallel(
                self.module, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]

    def autocast(self) -> Any:
        import torch

        return torch.autocast(self.device.type, dtype=torch.bfloat16,
                              enabled=self.config.optim.precision == "bf16" and not self.use_ds)

    # -- the loop ---------------------------------------------------------------------
    def train(self) -> SFTResult:
        book = self.config.bookkeeping
        position = self.book.position
        self.losses: list[float] = []
        self.eval_losses: list[tuple[int, float]] = []
        self.started, self.tokens_seen, halted = time.perf_counter(), 0, False
        self.epoch, self.rows_done = position.epoch, position.rows_in_epoch
        self.order = self._epoch_order()
        if self.has_eval and book.eval_every and position.step == 0:
            self._evaluate(0)
        while self.book.position.step < self.total_steps:
            indices = self._next_rows()
            step_loss, grad_norm, step_tokens, by_env = self._step(indices)
            self.rows_done += len(indices)
            self.book.position = TrainerPosition(self.book.position.step + 1, self.epoch, self.rows_done,
                                                 self.mixed.state() if self.mixed is not None else {})
            self.losses.append(step_loss)
            self._log(step_loss, grad_norm, step_tokens, by_env)
            if self.has_eval and self.book.due(book.eval_every):
                self._evaluate(self.book.position.step)
            halted = self.book.halted
            if self.book.due(book.save_every) or halted:
                self._save()
            if halted:
                break
        return self._finish(halted)

    def _epoch_order(self) -> list[int]:
        dist = self.dist
        return epoch_order(len(self.data.packs), self.config.bookkeeping.seed, self.epoch)[
            dist.rank::dist.world][:self.rows_per_rank]

    def _next_rows(self) -> list[int]:
        """The packed rows of the next optimiser step (drawn by env weight with a mixture)."""
        grad_accum = self.config.optim.grad_accum
        if self.mixed is not None:  # each row's env drawn by weight; per-env cursors
            return [row for _, row in self.mixed.take(self.book.position.step + 1, grad_accum)]
        if self.rows_done >= self.rows_per_rank or (self.use_ds and self.rows_done + grad_accum > self.rows_per_rank):
            self.epoch, self.rows_done = self.epoch + 1, 0
            self.order = self._epoch_order()
        return self.order[self.rows_done:self.rows_done + grad_accum]

    def _step(self, indices: list[int]) -> tuple[float, float, float, dict[str, list[float]]]:
        """One optimiser step over ``indices``: its loss, gradient norm, trained tokens (all
        ranks) and per-env ``[summed token loss, trained tokens, rows]``."""
        import torch

        dist, optim, engine = self.dist, self.config.optim, self.engine
        rows = [self.data.packs[i] for i in indices]
        step_tokens = all_sum(float(sum(p.num_trained for p in rows)), dist, self.device)
        step_loss = 0.0
        by_env: dict[str, list[float]] = {}  # name -> [summed token loss, trained tokens, rows]
        for index, pack in enumerate(rows):
            last = index == len(rows) - 1
            sync = self.module.no_sync() if dist.world > 1 and not last and engine is None else nullcontext()
            with sync, self.autocast():
                # DDP averages gradients over ranks; scale by world to keep a token-level mean.
                loss = self.module(pack_to_batch(pack, self.device)) * (dist.world / step_tokens)
            if engine is not None:
                engine.backward(loss, scale_wrt_gas=False)
                engine.step()
            else:
                loss.backward()
            step_loss += float(loss.detach()) / dist.world
            self.tokens_seen += len(pack)
            if self.mixed is not None:
                totals = by_env.setdefault(self.config.data.envs[self.source_of_row[indices[index]]].name,
                                           [0.0, 0.0, 0.0])
                totals[0] += float(loss.detach()) * step_tokens / dist.world
                totals[1] += pack.num_trained
                totals[2] += 1
        if engine is None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, optim.max_grad_norm))
            self.book.step_optimizer()
        else:
            grad_norm = float(engine.get_global_grad_norm() or 0.0)
        return all_sum(step_loss, dist, self.device), grad_norm, step_tokens, by_env

    def _log(self, step_loss: float, grad_norm: float, step_tokens: float, by_env: dict[str, list[float]]) -> None:
        world = self.dist.world
        elapsed = time.perf_counter() - self.started
        tokens_per_s = self.tokens_seen * world / max(elapsed, 1e-9)
        per_env = {f"{key}/{name}": value for name, (summed, tokens, count) in by_env.items()
                   for key, value in (("loss", summed / max(tokens, 1.0)), ("rows", count))}
        self.book.log({"epoch": self.epoch, "loss": step_loss, "grad_norm": grad_norm, "trained_tokens": step_tokens,
                       "tokens_per_s": tokens_per_s, "tokens": self.tokens_seen * world, "elapsed_s": elapsed,
                       **per_env}, loss=step_loss, tokens_per_s=tokens_per_s, total_steps=self.total_steps)

    def _evaluate(self, step: int) -> None:
        metrics = _evaluate(self.module, self.eval_parts, self.device, self.autocast)
        self.eval_losses.append((step, metrics["eval_loss"]))
        assert self.book.logger is not None
        self.book.logger.log(step, metrics)

    def _save(self) -> None:
        engine = self.engine

        def write_engine_state(staging: Path) -> None:
            if engine is not None:
                engine.save_checkpoint(str(staging), tag="deepspeed")

        self.book.save(self.model, self.tokenizer, write=write_engine_state,
                       full_weights=full_weights(engine, self.model), optimizer_state=engine is None,
                       barrier=lambda: barrier(self.dist))

    def _finish(self, halted: bool) -> SFTResult:
        step = self.book.position.step
        final_dir = None
        if not halted:
            if self.has_eval and (not self.eval_losses or self.eval_losses[-1][0] != step):
                self._evaluate(step)
            final_dir = self.book.save_final(self.model, self.tokenizer, full_weights(self.engine, self.model))
            barrier(self.dist)
        self.book.close()
        elapsed = time.perf_counter() - self.started
        return SFTResult(self.book.output_dir, final_dir, step, tuple(self.losses), tuple(self.eval_losses),
                         self.data.report, self.tokens_seen * self.dist.world / max(elapsed, 1e-9), halted)

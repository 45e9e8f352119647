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
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.common import Checkpointer, MetricsLogger
from trainers.common.threads import torch_threads
from trainers.data import (
    PreparedData,
    TruncationReport,
    epoch_order,
    pack_to_batch,
    prepare_packs,
)
from trainers.sft.config import SFTConfig, load_config
from trainers.sft.model import load_model, load_tokenizer, loss_sum, save_for_inference
from trainers.sft.progress import ProgressBar
from trainers.sft.sources import MixedRows, load_sources

__all__ = ["SFTConfig", "SFTResult", "TrainerPosition", "load_config", "make_optimizer", "train"]

# Optimiser and scheduler state inside a checkpoint directory (DeepSpeed keeps its own).
_OPTIMIZER_FILE = "optimizer.pt"


@dataclass(frozen=True, slots=True)
class SFTResult:
    """What a run produced."""

    output_dir: Path
    final_dir: Path | None
    steps: int
    losses: tuple[float, ...]
    eval_losses: tuple[tuple[int, float], ...]
    train_report: TruncationReport
    tokens_per_s: float
    halted: bool


@dataclass(frozen=True, slots=True)
class TrainerPosition:
    """Where the loop is: optimiser steps done, and rows consumed in the current epoch.

    The data order is a function of (seed, epoch) (per env, with a mixture), so this is all a
    resume needs to feed the same rows in the same order.
    """

    step: int = 0
    epoch: int = 0
    rows_in_epoch: int = 0
    streams: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """With ``data.envs``: each env's ``[epoch, rows taken]`` (epoch/rows_in_epoch unused)."""


@dataclass(frozen=True, slots=True)
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_dist(device_pref: str, need_group: bool = False) -> tuple[_Dist, Any]:
    """Rank/world from the launcher's environment; ``need_group``: DeepSpeed wants a process
    group even for one process, so a plain ``coa train sft`` makes a one-rank group on
    loopback instead of letting DeepSpeed go looking for MPI."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = _Dist(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
    cuda = torch.cuda.is_available() and device_pref in ("auto", "cuda")
    device = torch.device(f"cuda:{dist.local_rank}" if cuda else "cpu")
    if device_pref not in ("auto", "cuda", "cpu"):
        device = torch.device(device_pref)
    if cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend)
    elif need_group and not torch.distributed.is_initialized():
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        torch.distributed.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}",
                                             rank=0, world_size=1)
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
            os.environ.setdefault(key, value)  # what a launcher would have set
    return dist, device


def _barrier(dist: _Dist) -> None:
    if dist.world > 1:
        import torch

        torch.distributed.barrier()


def _all_sum(value: float, dist: _Dist, device: Any) -> float:
    if dist.world == 1:
        return value
    import torch

    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor)
    return float(tensor.item())


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


def make_optimizer(config: SFTConfig, model: Any, device: Any) -> Any:
    """AdamW over the trainable weights; no decay on biases and norms (``config.optim``)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": config.optim.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.optim.learning_rate, betas=config.optim.adam_betas,
                             fused=device.type == "cuda")


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


def _deepspeed_engine(config: SFTConfig, module: Any, optimizer: Any, scheduler: Any) -> Any:
    try:
        import deepspeed
    except ImportError as error:
        raise RuntimeError("resources.deepspeed is set but the `deepspeed` package is not "
                           "installed (pip install 'coa-envs[deepspeed]')") from error
    import json

    ds_config = json.loads(Path(config.resources.deepspeed or "").read_text(encoding="utf-8"))
    ds_config.update(train_micro_batch_size_per_gpu=1,
                     gradient_accumulation_steps=config.optim.grad_accum,
                     gradient_clipping=config.optim.max_grad_norm)
    if config.optim.precision == "bf16":
        ds_config["bf16"] = {"enabled": True}
    engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, lr_scheduler=scheduler,
                                      config=ds_config)
    return engine


def _full_weights(engine: Any, model: Any) -> Any:
    """ZeRO-3 shards each weight across ranks; every rank enters this context so rank 0
    sees whole tensors while it writes the inference checkpoint. Elsewhere a no-op."""
    if engine is None or engine.zero_optimization_stage() != 3:
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None)


def train(config: SFTConfig) -> SFTResult:
    """Run (or resume) a masked SFT run; returns the losses and where the model went."""
    with torch_threads(config.resources.torch_threads):
        return _train(config)


def _train(config: SFTConfig) -> SFTResult:
    import torch
    from transformers import get_cosine_schedule_with_warmup

    spec, optim, book = config.data, config.optim, config.bookkeeping
    dist, device = _init_dist(config.resources.device, need_group=bool(config.resources.deepspeed))
    output_dir = Path(book.output_dir)
    checkpoints = Checkpointer(output_dir, keep=book.keep_checkpoints, main=dist.main)
    checkpoint = checkpoints.resolve(book.resume)

    # -- data and model ---------------------------------------------------------------
    sources = load_sources(config, dist.main, lambda: _barrier(dist))
    texts = [t for source in sources for s in source.train for t in s.texts()]
    tokenizer = load_tokenizer(config, texts, source=str(checkpoint) if checkpoint else None)
    model = load_model(config, tokenizer, source=str(checkpoint) if checkpoint else None).to(device)
    parts = [prepare_packs(source.train, tokenizer, max_seq_len=spec.max_seq_len,
                           truncation=spec.truncation, pack_len=config.effective_pack_len)
             for source in sources]
    eval_parts = [(source.name, prepare_packs(source.eval, tokenizer, max_seq_len=spec.max_seq_len,
                                              truncation="truncate_right",
                                              pack_len=config.effective_pack_len))
                  for source in sources]
    # One row list; with a mixture each env's rows are a contiguous block of it.
    data = PreparedData(tuple(p for part in parts for p in part.packs),
                        _merged([part.report for part in parts]))
    source_of_row = [i for i, part in enumerate(parts) for _ in part.packs]
    has_eval = any(part.packs for _, part in eval_parts)
    if dist.main:
        for source, part in zip(sources, parts, strict=True):
            label = f" ({source.name})" if source.name else ""
            print(f"[sft] train data{label}: {part.report.summary()}", flush=True)
    rows_per_rank = len(data.packs) // dist.world
    if rows_per_rank == 0:
        raise ValueError(f"{len(data.packs)} packed rows cannot feed {dist.world} processes")
    use_ds = bool(config.resources.deepspeed)
    steps_per_epoch = (rows_per_rank // optim.grad_accum if use_ds
                       else math.ceil(rows_per_rank / optim.grad_accum))
    total_steps = optim.max_steps or steps_per_epoch * optim.num_epochs
    warmup = optim.warmup_steps if optim.warmup_steps is not None else \
        int(optim.warmup_ratio * total_steps)

    # -- optimiser, schedule, wrappers ------------------------------------------------
    optimizer = make_optimizer(config, model, device)
    scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, total_steps)
    position = TrainerPosition()
    if checkpoint is not None:
        position = TrainerPosition(**checkpoints.read_state(checkpoint)["position"])
        if not use_ds:
            saved = torch.load(checkpoint / _OPTIMIZER_FILE, map_location="cpu", weights_only=False)
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
    mixed = None
    if spec.envs:
        offsets = [sum(len(p.packs) for p in parts[:i]) for i in range(len(parts))]
        mixed = MixedRows(spec.envs, offsets, [len(p.packs) for p in parts], book.seed,
                          dist.rank, dist.world, position.streams)
    module = _make_loss_module(model, optim.chunked_loss)
    engine = None
    if use_ds:
        engine = _deepspeed_engine(config, module, optimizer, scheduler)
        if checkpoint is not None:
            engine.load_checkpoint(str(checkpoint), tag="deepspeed")
        module = engine
    elif dist.world > 1:
        module = torch.nn.parallel.DistributedDataParallel(
            module, device_ids=[device.index] if device.type == "cuda" else None)
    trainable = [p for p in model.parameters() if p.requires_grad]

    def autocast() -> Any:
        return torch.autocast(device.type, dtype=torch.bfloat16,
                              enabled=optim.precision == "bf16" and not use_ds)

    logger = MetricsLogger(output_dir, enabled=dist.main, tensorboard=book.tensorboard,
                           resume_step=position.step if checkpoint is not None else None,
                           tag_prefix="sft/")
    progress = ProgressBar(enabled=dist.main and book.progress, total_steps=total_steps,
                           initial_step=position.step)
    if checkpoint is not None:  # last: nothing above may draw from the restored streams
        checkpoints.restore_rng(checkpoint)

    def save(step: int) -> None:
        staging = checkpoints.staging(step)
        if engine is not None:
            engine.save_checkpoint(str(staging), tag="deepspeed")
        with _full_weights(engine, model):
            if dist.main:
                save_for_inference(model, tokenizer, staging, attention=config.model.attention)
        if dist.main and engine is None:
            torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                       staging / _OPTIMIZER_FILE)
        _barrier(dist)
        if dist.main:
            checkpoints.commit(step, {"position": dataclasses.asdict(position),
                                      "config": config.to_dict()})
        _barrier(dist)

    # -- the loop ---------------------------------------------------------------------
    losses: list[float] = []
    eval_losses: list[tuple[int, float]] = []
    started, tokens_seen, halted = time.perf_counter(), 0, False
    epoch, rows_done = position.epoch, position.rows_in_epoch
    def evaluate(step: int) -> None:
        metrics = _evaluate(module, eval_parts, device, autocast)
        eval_losses.append((step, metrics["eval_loss"]))
        logger.log(step, metrics)

    if has_eval and book.eval_every and position.step == 0:
        evaluate(0)
    order = epoch_order(len(data.packs), book.seed, epoch)[dist.rank::dist.world][:rows_per_rank]
    while position.step < total_steps:
        if mixed is not None:  # each row's env drawn by weight; per-env cursors
            indices = [row for _, row in mixed.take(position.step + 1, optim.grad_accum)]
        else:
            if rows_done >= rows_per_rank or (use_ds and rows_done + optim.grad_accum
                                              > rows_per_rank):
                epoch, rows_done = epoch + 1, 0
                order = epoch_order(len(data.packs), book.seed, epoch)[dist.rank::dist.world]
                order = order[:rows_per_rank]
            indices = order[rows_done:rows_done + optim.grad_accum]
        rows = [data.packs[i] for i in indices]
        step_tokens = _all_sum(float(sum(p.num_trained for p in rows)), dist, device)
        step_loss = 0.0
        by_env: dict[str, list[float]] = {}  # name -> [summed token loss, trained tokens, rows]
        for index, pack in enumerate(rows):
            last = index == len(rows) - 1
            sync = module.no_sync() if dist.world > 1 and not last and engine is None \
                else nullcontext()
            with sync, autocast():
                # DDP averages gradients over ranks; scale by world to keep a token-level mean.
                loss = module(pack_to_batch(pack, device)) * (dist.world / step_tokens)
            if engine is not None:
                engine.backward(loss, scale_wrt_gas=False)
                engine.step()
            else:
                loss.backward()
            step_loss += float(loss.detach()) / dist.world
            tokens_seen += len(pack)
            if mixed is not None:
                name = spec.envs[source_of_row[indices[index]]].name
                totals = by_env.setdefault(name, [0.0, 0.0, 0.0])
                totals[0] += float(loss.detach()) * step_tokens / dist.world
                totals[1] += pack.num_trained
                totals[2] += 1
        if engine is None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, optim.max_grad_norm))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            grad_norm = float(engine.get_global_grad_norm() or 0.0)
        step_loss = _all_sum(step_loss, dist, device)
        rows_done += len(rows)
        position = TrainerPosition(position.step + 1, epoch, rows_done,
                                   mixed.state() if mixed is not None else {})
        losses.append(step_loss)
        elapsed = time.perf_counter() - started
        tokens_per_s = tokens_seen * dist.world / max(elapsed, 1e-9)
        if position.step % book.log_every == 0 or position.step == total_steps:
            per_env = {f"{key}/{name}": value for name, (summed, tokens, count) in by_env.items()
                       for key, value in (("loss", summed / max(tokens, 1.0)), ("rows", count))}
            logger.log(position.step, {"epoch": epoch, "loss": step_loss,
                                       "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                                       "trained_tokens": step_tokens, "tokens_per_s": tokens_per_s,
                                       "tokens": tokens_seen * dist.world, "elapsed_s": elapsed,
                                       **per_env})
            progress.update(position.step, step_loss, tokens_per_s)
        if has_eval and book.eval_every and position.step % book.eval_every == 0:
            evaluate(position.step)
        halted = book.halt_at_step is not None and position.step >= book.halt_at_step
        if (book.save_every and position.step % book.save_every == 0) or halted:
            save(position.step)
        if halted:
            break

    final_dir = None
    if not halted:
        if has_eval and (not eval_losses or eval_losses[-1][0] != position.step):
            evaluate(position.step)
        final_dir = output_dir / "final"
        spec_model = config.model
        with _full_weights(engine, model):
            if dist.main:
                save_for_inference(model, tokenizer, final_dir, attention=spec_model.attention,
                                   merge_lora=spec_model.lora is not None
                                   and spec_model.merge_lora_on_save)
        _barrier(dist)
    logger.close()
    progress.close()
    elapsed = time.perf_counter() - started
    return SFTResult(output_dir, final_dir, position.step, tuple(losses), tuple(eval_losses),
                     data.report, tokens_seen * dist.world / max(elapsed, 1e-9), halted)

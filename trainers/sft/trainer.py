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
from trainers.data import (
    PreparedData,
    TruncationReport,
    epoch_order,
    load_samples,
    pack_to_batch,
    prepare_packs,
    split_eval,
)
from trainers.sft.config import SFTConfig, load_config
from trainers.sft.model import load_model, load_tokenizer, loss_sum, save_for_inference
from trainers.sft.progress import ProgressBar

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

    The data order is a function of (seed, epoch), so this is all a resume needs to feed
    the same rows in the same order.
    """

    step: int = 0
    epoch: int = 0
    rows_in_epoch: int = 0


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


def _load_data(config: SFTConfig, dist: _Dist) -> tuple[list[Any], list[Any]]:
    spec = config.data
    train_path = Path(spec.train_path)
    if not train_path.exists():
        if not spec.generate:
            raise FileNotFoundError(f"train_path {train_path} does not exist (set `generate` "
                                    "to make it from an env, e.g. the oracle on SynthHop)")
        if dist.main:
            from trainers.data.generate import generate_trajectories

            generate = dict(spec.generate)
            generate_trajectories(generate.pop("env_id"), train_path,
                                  int(generate.pop("n", 300)), **generate)
        _barrier(dist)
    samples = load_samples(train_path, spec.format)
    if spec.min_reward is not None:
        samples = [s for s in samples if s.meta.get("reward", 1.0) >= spec.min_reward]
    if spec.eval_path:
        return samples, load_samples(spec.eval_path, spec.format)
    return split_eval(samples, spec.eval_fraction, config.bookkeeping.seed)


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


def _evaluate(module: Any, data: PreparedData, device: Any, autocast: Any) -> float:
    import torch

    module.eval()
    total, count = 0.0, 0
    with torch.no_grad(), autocast():
        for pack in data.packs:
            total += float(module(pack_to_batch(pack, device)))
            count += pack.num_trained
    module.train()
    return total / max(count, 1)


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
    import torch

    threads = torch.get_num_threads()
    if config.resources.torch_threads:
        torch.set_num_threads(config.resources.torch_threads)
    try:
        return _train(config)
    finally:  # a process-wide setting: give the caller back what it had
        torch.set_num_threads(threads)


def _train(config: SFTConfig) -> SFTResult:
    import torch
    from transformers import get_cosine_schedule_with_warmup

    spec, optim, book = config.data, config.optim, config.bookkeeping
    dist, device = _init_dist(config.resources.device, need_group=bool(config.resources.deepspeed))
    output_dir = Path(book.output_dir)
    checkpoints = Checkpointer(output_dir, keep=book.keep_checkpoints, main=dist.main)
    checkpoint = checkpoints.resolve(book.resume)

    # -- data and model ---------------------------------------------------------------
    train_samples, eval_samples = _load_data(config, dist)
    texts = [t for s in train_samples for t in s.texts()]
    tokenizer = load_tokenizer(config, texts, source=str(checkpoint) if checkpoint else None)
    model = load_model(config, tokenizer, source=str(checkpoint) if checkpoint else None).to(device)
    data = prepare_packs(train_samples, tokenizer, max_seq_len=spec.max_seq_len,
                         truncation=spec.truncation, pack_len=config.effective_pack_len)
    eval_data = prepare_packs(eval_samples, tokenizer, max_seq_len=spec.max_seq_len,
                              truncation="truncate_right", pack_len=config.effective_pack_len)
    if dist.main:
        print(f"[sft] train data: {data.report.summary()}", flush=True)
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
    if eval_data.packs and book.eval_every and position.step == 0:
        eval_losses.append((0, _evaluate(module, eval_data, device, autocast)))
        logger.log(0, {"eval_loss": eval_losses[-1][1]})
    order = epoch_order(len(data.packs), book.seed, epoch)[dist.rank::dist.world][:rows_per_rank]
    while position.step < total_steps:
        if rows_done >= rows_per_rank or (use_ds and rows_done + optim.grad_accum > rows_per_rank):
            epoch, rows_done = epoch + 1, 0
            order = epoch_order(len(data.packs), book.seed, epoch)[dist.rank::dist.world]
            order = order[:rows_per_rank]
        rows = [data.packs[i] for i in order[rows_done:rows_done + optim.grad_accum]]
        step_tokens = _all_sum(float(sum(p.num_trained for p in rows)), dist, device)
        step_loss = 0.0
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
        if engine is None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, optim.max_grad_norm))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            grad_norm = float(engine.get_global_grad_norm() or 0.0)
        step_loss = _all_sum(step_loss, dist, device)
        rows_done += len(rows)
        position = TrainerPosition(position.step + 1, epoch, rows_done)
        losses.append(step_loss)
        elapsed = time.perf_counter() - started
        tokens_per_s = tokens_seen * dist.world / max(elapsed, 1e-9)
        if position.step % book.log_every == 0 or position.step == total_steps:
            logger.log(position.step, {"epoch": epoch, "loss": step_loss,
                                       "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                                       "trained_tokens": step_tokens, "tokens_per_s": tokens_per_s,
                                       "tokens": tokens_seen * dist.world, "elapsed_s": elapsed})
            progress.update(position.step, step_loss, tokens_per_s)
        if eval_data.packs and book.eval_every and position.step % book.eval_every == 0:
            eval_losses.append((position.step, _evaluate(module, eval_data, device, autocast)))
            logger.log(position.step, {"eval_loss": eval_losses[-1][1]})
        halted = book.halt_at_step is not None and position.step >= book.halt_at_step
        if (book.save_every and position.step % book.save_every == 0) or halted:
            save(position.step)
        if halted:
            break

    final_dir = None
    if not halted:
        if eval_data.packs and (not eval_losses or eval_losses[-1][0] != position.step):
            eval_losses.append((position.step, _evaluate(module, eval_data, device, autocast)))
            logger.log(position.step, {"eval_loss": eval_losses[-1][1]})
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

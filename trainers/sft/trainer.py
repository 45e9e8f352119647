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

import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.data import (
    PreparedData,
    TruncationReport,
    epoch_order,
    load_samples,
    pack_to_batch,
    prepare_packs,
    split_eval,
)
from trainers.sft.checkpoint import (
    TrainerPosition,
    find_checkpoint,
    load_state,
    restore_rng,
    rotate_checkpoints,
    save_state,
)
from trainers.sft.config import SFTConfig, load_config
from trainers.sft.metrics import MetricsLogger
from trainers.sft.model import load_model, load_tokenizer, loss_sum, save_for_inference

__all__ = ["SFTConfig", "SFTResult", "load_config", "train"]


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
    train_path = Path(config.train_path)
    if not train_path.exists():
        if not config.generate:
            raise FileNotFoundError(f"train_path {train_path} does not exist (set `generate` "
                                    "to make it from an env, e.g. the oracle on SynthHop)")
        if dist.main:
            from trainers.data.generate import generate_trajectories

            spec = dict(config.generate)
            generate_trajectories(spec.pop("env_id"), train_path, int(spec.pop("n", 300)),
                                  **spec)
        _barrier(dist)
    samples = load_samples(train_path, config.data_format)
    if config.min_reward is not None:
        samples = [s for s in samples if s.meta.get("reward", 1.0) >= config.min_reward]
    if config.eval_path:
        return samples, load_samples(config.eval_path, config.data_format)
    return split_eval(samples, config.eval_fraction, config.seed)


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


def _optimizer(config: SFTConfig, model: Any, device: Any) -> Any:
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=config.adam_betas,
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
        raise RuntimeError("config.deepspeed is set but the `deepspeed` package is not installed "
                           "(pip install 'coa-envs[deepspeed]')") from error
    import json

    ds_config = json.loads(Path(config.deepspeed or "").read_text(encoding="utf-8"))
    ds_config.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=config.grad_accum,
                     gradient_clipping=config.max_grad_norm)
    if config.precision == "bf16":
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
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    try:
        return _train(config)
    finally:  # a process-wide setting: give the caller back what it had
        torch.set_num_threads(threads)


def _train(config: SFTConfig) -> SFTResult:
    import torch
    from transformers import get_cosine_schedule_with_warmup

    dist, device = _init_dist(config.device, need_group=bool(config.deepspeed))
    output_dir = Path(config.output_dir)
    checkpoint = find_checkpoint(output_dir, config.resume)

    # -- data and model ---------------------------------------------------------------
    train_samples, eval_samples = _load_data(config, dist)
    texts = [t for s in train_samples for t in s.texts()]
    tokenizer = load_tokenizer(config, texts, source=str(checkpoint) if checkpoint else None)
    model = load_model(config, tokenizer, source=str(checkpoint) if checkpoint else None).to(device)
    data = prepare_packs(train_samples, tokenizer, max_seq_len=config.max_seq_len,
                         truncation=config.truncation, pack_len=config.effective_pack_len)
    eval_data = prepare_packs(eval_samples, tokenizer, max_seq_len=config.max_seq_len,
                              truncation="truncate_right", pack_len=config.effective_pack_len)
    if dist.main:
        print(f"[sft] train data: {data.report.summary()}", flush=True)
    rows_per_rank = len(data.packs) // dist.world
    if rows_per_rank == 0:
        raise ValueError(f"{len(data.packs)} packed rows cannot feed {dist.world} processes")
    use_ds = bool(config.deepspeed)
    steps_per_epoch = (rows_per_rank // config.grad_accum if use_ds
                       else math.ceil(rows_per_rank / config.grad_accum))
    total_steps = config.max_steps or steps_per_epoch * config.num_epochs
    warmup = config.warmup_steps if config.warmup_steps is not None else \
        int(config.warmup_ratio * total_steps)

    # -- optimiser, schedule, wrappers ------------------------------------------------
    optimizer = _optimizer(config, model, device)
    scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, total_steps)
    position = TrainerPosition()
    state = load_state(checkpoint) if checkpoint else None
    if state is not None and not use_ds:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    if state is not None:
        position = state["position"]
    module = _make_loss_module(model, config.chunked_loss)
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
                              enabled=config.precision == "bf16" and not use_ds)

    logger = MetricsLogger(output_dir, enabled=dist.main, tensorboard=config.tensorboard,
                           progress=config.progress, total_steps=total_steps,
                           initial_step=position.step)
    if state is not None:
        restore_rng(state["rng"])  # last: nothing above may draw from the restored streams

    def save(step_dir: Path) -> None:
        if engine is not None:
            engine.save_checkpoint(str(step_dir), tag="deepspeed")
        with _full_weights(engine, model):
            if dist.main:
                save_for_inference(model, tokenizer, step_dir, attention=config.attention)
        if dist.main:
            save_state(step_dir, optimizer=None if engine else optimizer,
                       scheduler=None if engine else scheduler, position=position,
                       config=config.to_dict())
            rotate_checkpoints(output_dir, config.save_total_limit)
        _barrier(dist)

    # -- the loop ---------------------------------------------------------------------
    losses: list[float] = []
    eval_losses: list[tuple[int, float]] = []
    started, tokens_seen, halted = time.perf_counter(), 0, False
    epoch, rows_done = position.epoch, position.rows_in_epoch
    if eval_data.packs and config.eval_every and position.step == 0:
        eval_losses.append((0, _evaluate(module, eval_data, device, autocast)))
        logger.log({"step": 0, "eval_loss": eval_losses[-1][1]})
    order = epoch_order(len(data.packs), config.seed, epoch)[dist.rank::dist.world][:rows_per_rank]
    while position.step < total_steps:
        if rows_done >= rows_per_rank or (use_ds and rows_done + config.grad_accum > rows_per_rank):
            epoch, rows_done = epoch + 1, 0
            order = epoch_order(len(data.packs), config.seed, epoch)[dist.rank::dist.world]
            order = order[:rows_per_rank]
        rows = [data.packs[i] for i in order[rows_done:rows_done + config.grad_accum]]
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
            grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm))
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
        if position.step % config.log_every == 0 or position.step == total_steps:
            logger.log({"step": position.step, "epoch": epoch, "loss": step_loss,
                        "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                        "trained_tokens": step_tokens, "tokens_per_s": tokens_per_s,
                        "tokens": tokens_seen * dist.world, "elapsed_s": elapsed})
        if eval_data.packs and config.eval_every and position.step % config.eval_every == 0:
            eval_losses.append((position.step, _evaluate(module, eval_data, device, autocast)))
            logger.log({"step": position.step, "eval_loss": eval_losses[-1][1]})
        halted = config.halt_at_step is not None and position.step >= config.halt_at_step
        if (config.save_every and position.step % config.save_every == 0) or halted:
            save(output_dir / f"checkpoint-{position.step}")
        if halted:
            break

    final_dir = None
    if not halted:
        if eval_data.packs and (not eval_losses or eval_losses[-1][0] != position.step):
            eval_losses.append((position.step, _evaluate(module, eval_data, device, autocast)))
            logger.log({"step": position.step, "eval_loss": eval_losses[-1][1]})
        final_dir = output_dir / "final"
        with _full_weights(engine, model):
            if dist.main:
                save_for_inference(model, tokenizer, final_dir, attention=config.attention,
                                   merge_lora=config.lora is not None and config.merge_lora_on_save)
        _barrier(dist)
    logger.close()
    elapsed = time.perf_counter() - started
    return SFTResult(output_dir, final_dir, position.step, tuple(losses), tuple(eval_losses),
                     data.report, tokens_seen * dist.world / max(elapsed, 1e-9), halted)

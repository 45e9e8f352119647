"""The SFT trainer's processes: rank and device from the launcher, collectives, DeepSpeed.

``torchrun``/``accelerate launch`` set ``WORLD_SIZE``/``RANK``/``LOCAL_RANK``; one process
runs without a process group (DeepSpeed excepted: it gets a one-rank group on loopback).
Torch and DeepSpeed are imported inside the functions.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.sft.config import SFTConfig

__all__ = ["Dist", "all_sum", "barrier", "deepspeed_engine", "full_weights", "init_dist"]


@dataclass(frozen=True, slots=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_dist(device_pref: str, need_group: bool = False) -> tuple[Dist, Any]:
    """Rank/world from the launcher's environment; ``need_group``: DeepSpeed wants a process
    group even for one process, so a plain ``coa train sft`` makes a one-rank group on
    loopback instead of letting DeepSpeed go looking for MPI."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = Dist(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
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


def barrier(dist: Dist) -> None:
    if dist.world > 1:
        import torch

        torch.distributed.barrier()


def all_sum(value: float, dist: Dist, device: Any) -> float:
    if dist.world == 1:
        return value
    import torch

    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor)
    return float(tensor.item())


def deepspeed_engine(config: SFTConfig, module: Any, optimizer: Any, scheduler: Any) -> Any:
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


def full_weights(engine: Any, model: Any) -> Any:
    """ZeRO-3 shards each weight across ranks; every rank enters this context so rank 0
    sees whole tensors while it writes the inference checkpoint. Elsewhere a no-op."""
    if engine is None or engine.zero_optimization_stage() != 3:
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None)

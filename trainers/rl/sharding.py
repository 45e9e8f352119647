"""How the learner's ranks hold the model: DDP replicas or FSDP2 shards (``learner_strategy``).

* ``ddp``: every rank holds the whole policy, critic and optimiser state; DDP averages the
  gradients. Simple and fast while the model and AdamW's two moments fit one device.
* ``fsdp``: torch's FSDP2 (``fully_shard``): each rank keeps ``1/world`` of every parameter,
  gradient and AdamW moment (as DTensors). A forward all-gathers one decoder layer at a time
  and frees it after; a backward reduce-scatters the gradients, averaged over ranks like
  DDP's, so the learner's loss scaling is the same for both. A 7B policy's fp32 weights,
  gradients and moments (~112 GB) fit 80 GB devices from two ranks up. The frozen reference
  model is sharded too.

Checkpoints and weight sync stay in one format whatever the strategy and rank count:
:func:`gathered` turns every DTensor of a state into the full tensor (a collective: every
rank calls it, rank 0 keeps the result) and :func:`scatter_module` / :func:`scatter_optim`
cut a full state back into the current shards, so a run saved by 2 FSDP ranks resumes on 1
DDP process, 4 FSDP ranks, or the reverse. The price is that rank 0 holds one full copy in
host memory while saving; torch.distributed.checkpoint's sharded files would avoid it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["gathered", "no_grad_sync", "scatter_module", "scatter_optim", "shard"]


def _blocks(module: Any) -> list[Any]:
    """The model's repeated blocks (decoder layers): each becomes its own FSDP unit, so only
    one block's full weights exist at a time. Found as the longest ``ModuleList``."""
    import torch

    lists = [m for m in module.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def shard(module: Any, mesh: Any = None, source_rank: int | None = 0) -> Any:
    """Shard ``module`` in place with FSDP2: its blocks, then the rest as the root unit.

    FSDP2 keeps each rank's own slice of what that rank built, so ranks must start from
    the same weights: ``source_rank``'s are broadcast first (DDP does the same when it
    wraps). Ranks seed differently, so a randomly initialised model or head would
    otherwise be a mix of ``world`` different initialisations.
    """
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    if source_rank is not None:
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=source_rank)
    for block in _blocks(module):
        fully_shard(block, mesh=mesh)
    fully_shard(module, mesh=mesh)
    return module


@contextmanager
def no_grad_sync(module: Any) -> Iterator[None]:
    """Accumulate this backward's gradients locally (DDP's ``no_sync``; FSDP2's switch)."""
    if hasattr(module, "no_sync"):
        with module.no_sync():
            yield
        return
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def _is_dtensor(value: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def gathered(state: Any, keep: bool = True) -> Any:
    """``state`` with every DTensor replaced by its full tensor on CPU (a collective: every
    rank must call it with the same structure). ``keep=False`` (ranks other than 0) gathers
    and drops, so only one full copy is ever held."""
    if isinstance(state, dict):
        return {key: gathered(value, keep) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(gathered(value, keep) for value in state)
    if _is_dtensor(state):
        full = state.full_tensor()
        return full.cpu() if keep else None
    return state


def _like(full: Any, current: Any) -> Any:
    from torch.distributed.tensor import distribute_tensor

    if not _is_dtensor(current):
        return full
    return distribute_tensor(full.to(current.device, current.dtype), current.device_mesh,
                             current.placements)


def scatter_module(module: Any, full_state: dict[str, Any]) -> None:
    """Load a full (unsharded) state dict into a sharded ``module``."""
    current = module.state_dict()
    missing = set(current) - set(full_state)
    if missing:
        raise KeyError(f"the checkpoint lacks {sorted(missing)[:5]}")
    module.load_state_dict({key: _like(full_state[key], value) for key, value in current.items()})


def scatter_optim(optimizer: Any, full_state: dict[str, Any]) -> dict[str, Any]:
    """A torch optimizer state dict (full tensors, index-keyed) cut to the shards of the
    parameters it belongs to, ready for ``optimizer.load_state_dict``."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for index, entry in full_state["state"].items():
        param = params[int(index)]
        state[index] = {key: _like(value, param) if getattr(value, "dim", lambda: 0)() else value
                        for key, value in entry.items()}
    return {**full_state, "state": state}

"""The supervised trainers' optimiser and schedule (SFT, DPO), and their place in a checkpoint.

AdamW with no weight decay on biases and norms, a cosine schedule after a linear warm-up, and
both states saved as one file of the checkpoint directory (DeepSpeed keeps its own), so a
resumed run continues the exact schedule. The RL learner has its own optimiser (policy and
critic clipped apart, loss scaling: :mod:`trainers.rl.optim`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.common.sections import OptimSection

__all__ = ["OPTIMIZER_FILE", "load_optimizer_state", "make_optimizer", "make_schedule", "save_optimizer_state"]

#: Optimiser and scheduler state inside a checkpoint directory.
OPTIMIZER_FILE = "optimizer.pt"


def make_optimizer(optim: OptimSection, model: Any, device: Any) -> Any:
    """AdamW over the trainable weights; no decay on biases and norms (``optim``)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": optim.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=optim.learning_rate, betas=optim.adam_betas,
                             fused=device.type == "cuda")


def make_schedule(optim: OptimSection, optimizer: Any, total_steps: int) -> Any:
    """Linear warm-up (``warmup_steps``, else ``warmup_ratio`` of the run), then cosine to 0."""
    from transformers import get_cosine_schedule_with_warmup

    warmup = optim.warmup_steps if optim.warmup_steps is not None else int(optim.warmup_ratio * total_steps)
    return get_cosine_schedule_with_warmup(optimizer, warmup, total_steps)


def save_optimizer_state(directory: str | Path, optimizer: Any, scheduler: Any) -> None:
    import torch

    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
               Path(directory) / OPTIMIZER_FILE)


def load_optimizer_state(directory: str | Path, optimizer: Any, scheduler: Any) -> None:
    import torch

    saved = torch.load(Path(directory) / OPTIMIZER_FILE, map_location="cpu", weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])

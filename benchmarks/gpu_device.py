"""The device handling every GPU script shares (imported as a sibling: ``from gpu_device import``).

The scripts run the same code on ``cuda`` (the figures) and on ``cpu`` (a dry run of the path,
``gpu_check.sh --device cpu``). What differs between the two is kept here, in one place:
refusing ``cuda`` on a machine without it (one message naming the dry run), waiting for queued
kernels before a clock is read, and naming the device in the printed figures.
"""

from __future__ import annotations

from typing import Any

__all__ = ["device_name", "device_parser", "is_cuda", "require_device", "synchronize"]


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def device_parser(description: str, *, dtype: str | None = None) -> Any:
    """An argparse parser with the shared ``--device`` option (and ``--dtype`` when given)."""
    import argparse

    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (the figures) or cpu (a dry run)")
    if dtype is not None:
        parser.add_argument("--dtype", default=dtype)
    return parser


def require_device(device: str, dry_run: str = "--device cpu") -> None:
    """Stop before any work when ``cuda`` is asked for on a machine without it."""
    import torch

    if is_cuda(device) and not torch.cuda.is_available():
        raise SystemExit(f"no CUDA device: run on the GPU machine or pass {dry_run}")


def synchronize(device: str) -> None:
    """Wait for the device's queued kernels, so a wall clock read next measures them."""
    if is_cuda(device):
        import torch

        torch.cuda.synchronize()


def device_name(device: str) -> str:
    """What the figures are labelled with: the GPU's model, or ``cpu``."""
    if not is_cuda(device):
        return "cpu"
    import torch

    return torch.cuda.get_device_name()

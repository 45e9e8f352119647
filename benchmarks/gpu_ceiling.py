"""The device's measured bf16 matrix-multiply ceiling, the denominator MFU is read against.

A nominal peak (H100 SXM: 989 dense bf16 TFLOP/s) is a datasheet figure that no kernel
reaches; an MFU quoted only against it hides how much of the gap is the hardware. So the
GPU check measures, in the same session, what a large square bf16 product achieves:

    python benchmarks/gpu_ceiling.py                 # 8192^3, ten timed products
    python benchmarks/gpu_ceiling.py --device cpu --size 1024 --repeats 3   # dry run

Random normal inputs (zeros run faster on some parts: fewer toggling bits). Prints one
JSON object with the mean, min and max TFLOP/s over the timed products.
"""

from __future__ import annotations

import json
import time

from gpu_device import device_name, device_parser, is_cuda, require_device, synchronize


def measure(size: int, repeats: int, warmup: int, device: str, dtype_name: str) -> dict:
    import torch

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    for _ in range(warmup):
        torch.matmul(a, b)
    rates = []
    for _ in range(repeats):
        if is_cuda(device):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            began = time.perf_counter()
            torch.matmul(a, b)
            seconds = time.perf_counter() - began
        rates.append(2 * size**3 / seconds / 1e12)
    return {"size": size, "dtype": dtype_name, "repeats": repeats,
            "tflops_mean": round(sum(rates) / len(rates), 1),
            "tflops_min": round(min(rates), 1), "tflops_max": round(max(rates), 1)}


def launch_overhead(device: str, launches: int = 2000) -> dict:
    """Microseconds per small kernel launch, and per host<->device round trip (``.item()``).

    Decoding a small model is a few hundred small kernels per token, so these two figures,
    not the matmul rate, bound its tokens/s; they explain engine figures far below the
    FLOP ceiling and what CUDA graphs (one launch per step) would buy.
    """
    import torch

    x = torch.zeros(1, device=device)
    for _ in range(50):
        x.add_(1)
    synchronize(device)
    began = time.perf_counter()
    for _ in range(launches):
        x.add_(1)
    synchronize(device)
    launch_us = (time.perf_counter() - began) / launches * 1e6
    began = time.perf_counter()
    for _ in range(200):
        x.add_(1).item()
    roundtrip_us = (time.perf_counter() - began) / 200 * 1e6
    return {"launch_us": round(launch_us, 2), "roundtrip_us": round(roundtrip_us, 2)}


def main() -> None:
    parser = device_parser(__doc__, dtype="bfloat16")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    require_device(args.device)
    result = measure(args.size, args.repeats, args.warmup, args.device, args.dtype)
    result.update(launch_overhead(args.device))
    result["device"] = device_name(args.device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Where an SFT step's time goes on the device: torch.profiler over a few steps of our trainer.

A diagnosis script for the GPU check (not a benchmark): same random-init Qwen2.5-0.5B-shaped
model and SynthHop data as ``gpu_sft.py``; prints the top operators by self CUDA time and by
self CPU time, and the step time at two packed lengths, so a fixed per-step cost (launches,
host syncs, the optimiser) can be told from per-token work.

    python benchmarks/gpu_sft_profile.py --pack-len 8192 --steps 6
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from gpu_device import device_parser, is_cuda, require_device
from gpu_sft import make_data, make_model_dir, run_ours


def main() -> None:
    parser = device_parser(__doc__)
    parser.add_argument("--pack-len", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--preset", default="qwen0.5b")
    args = parser.parse_args()
    from torch.profiler import ProfilerActivity, profile

    require_device(args.device, dry_run="--device cpu --preset tiny")

    work = Path(tempfile.mkdtemp(prefix="coa_sft_profile_"))
    data_path, tokenizer, _ = make_data(work, args.samples, 512)
    model_dir = make_model_dir(work / "model", tokenizer, args.preset)
    run_ours(model_dir, data_path, work / "warm", steps=2, pack_len=args.pack_len,
             device=args.device, precision="bf16", warmup=0)  # kernels, allocator
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if is_cuda(args.device) else [])
    with profile(activities=activities) as prof:
        result = run_ours(model_dir, data_path, work / "prof", steps=args.steps,
                          pack_len=args.pack_len, device=args.device, precision="bf16", warmup=1)
    print("tokens/s under the profiler:", round(result["tokens_per_s"], 1))
    key = "self_cuda_time_total" if is_cuda(args.device) else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20,
                                    max_name_column_width=60))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The GPU path in one run, for a bare GPU machine (one H100/H200): the gpu-marked tests, the
# bf16 matmul ceiling, SFT tokens/s + MFU against TRL, the hf engine against plain generate,
# and the RL loop's rollout/learner throughput without Ray. Every figure lands in
# OUT/gpu_figures.json (benchmarks/gpu_report.py), every script's output in OUT/*.out.
#
#   benchmarks/gpu_check.sh                       # on the GPU machine; OUT defaults to runs/gpu_check
#   benchmarks/gpu_check.sh --device cpu          # dry run here: same scripts, tiny presets
#
# The machine may lack packages the project needs (gymnasium, trl, datasets, math-verify,
# bm25s, ...): wheels in ./.whl (see docs/benchmarks.md, "GPU figures") are installed into a
# private target first, so the image's own packages stay untouched. Each step has its own
# time limit and a failed step is recorded, not fatal: one run gives every figure it can.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda
FULL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --full) FULL=1; shift ;;  # also SFT at 4k packed tokens
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT_DIR="${OUT:-runs/gpu_check}"
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
: >"$LOG"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

say() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/coa_site .whl/*.whl >>"$LOG" 2>&1 || say "wheel install failed (see log)"
  export PYTHONPATH="$PWD:/tmp/coa_site${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

# step NAME LIMIT_S COMMAND...: stdout to OUT/NAME.out, stderr to the log, time recorded.
step() {
  local name="$1" limit="$2"; shift 2
  local began=$SECONDS
  say "$name: $*"
  timeout --kill-after=10 "$limit" "$@" >"$OUT_DIR/$name.out" 2>>"$LOG"
  local rc=$?
  say "$name: exit $rc after $((SECONDS - began)) s"
}

step env 60 "$PY" -c '
import json, platform, torch, transformers
info = {"python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
for name in ("trl", "peft", "accelerate", "gymnasium"):
    try:
        info[name] = __import__(name).__version__
    except Exception as error:
        info[name] = f"missing ({type(error).__name__})"
print(json.dumps(info))'
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >>"$LOG" 2>&1

if [ "$DEVICE" = cpu ]; then
  export COA_TEST_DEVICE=cpu
  step ceiling 120 "$PY" benchmarks/gpu_ceiling.py --device cpu --size 512 --repeats 3
  step gpu_tests 1500 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" -m gpu tests/gpu \
    --junitxml="$OUT_DIR/gpu_tests.xml"
  step sft 600 "$PY" benchmarks/gpu_sft.py --device cpu --preset tiny --steps 6 --warmup-steps 2 \
    --pack-len 2048 --samples 80 --threads 1
  step engine 300 "$PY" benchmarks/gpu_hf_engine.py --device cpu --dtype float32 --batch 4 \
    --prompt-len 32 --new-tokens 16 --layers 2
  step rl 900 "$PY" benchmarks/gpu_rl.py --config examples/rl_tiny_dapo.yaml --steps 2 \
    --warmup-steps 0 --peak-tflops 0.1 resources.use_ray=false resources.torch_threads=1 \
    model.warm_start.episodes=0 algorithm.prompts_per_step=2 algorithm.group_size=4 \
    algorithm.minibatch_size=8 algorithm.dynamic_sampling=false
else
  step ceiling 120 "$PY" benchmarks/gpu_ceiling.py
  # The limits add up to more than the ~5 minutes the steps take, so a slow step is cut
  # before the device lease ends rather than taking the later figures with it.
  step gpu_tests 240 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" -m gpu tests/gpu \
    tests/trainers/sft/test_sft_gpu.py --junitxml="$OUT_DIR/gpu_tests.xml"
  step sft 300 "$PY" benchmarks/gpu_sft.py --preset qwen0.5b --steps 20 --warmup-steps 5 --compile \
    --pack-len 8192 --samples 300 --workdir /tmp/coa_sft_bench
  if [ "$FULL" = 1 ]; then
    step sft_4k 240 "$PY" benchmarks/gpu_sft.py --preset qwen0.5b --steps 20 --warmup-steps 5 \
      --pack-len 4096 --samples 300 --workdir /tmp/coa_sft_bench_4k
  fi
  step engine 120 "$PY" benchmarks/gpu_hf_engine.py --batch 16 --prompt-len 256 --new-tokens 256
  step rl 200 "$PY" benchmarks/gpu_rl.py --config examples/rl_gpu_0p5b_dapo.yaml --steps 3 \
    --warmup-steps 1 resources.use_ray=false model.warm_start.episodes=0 \
    algorithm.prompts_per_step=8 algorithm.minibatch_size=32 algorithm.dynamic_sampling=false
fi
"$PY" benchmarks/gpu_report.py "$OUT_DIR" | tee -a "$LOG"

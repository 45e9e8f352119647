#!/usr/bin/env bash
# One-step set-up for a fresh machine: system packages, the CPU build of torch, and the
# project with every extra that runs without a GPU, plus the docs tools. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

# System packages: chromium + chromedriver (browser crawl backends), bubblewrap (sandbox
# backend). Browsers cannot be downloaded by playwright here, so Debian's chromium is used.
APT_PACKAGES="chromium chromium-driver bubblewrap"
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  missing=""
  for pkg in $APT_PACKAGES; do dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done
  if [ -n "$missing" ]; then
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing \
      || echo "setup: could not install$missing; browser/bubblewrap tests will be skipped" >&2
  fi
fi

# A recent pip: older resolvers trip over lxml's doubly spelled html_clean extra.
"$PYTHON" -m pip install -q --disable-pip-version-check --upgrade "pip>=25"
# torch first, pinned to the CPU build: otherwise a dependency could pull a multi-GB CUDA build.
"$PYTHON" -m pip install -q --disable-pip-version-check "torch==2.13.0"
"$PYTHON" -m pip install -q --disable-pip-version-check -e ".[dev,all,docs]"
echo "setup: done ($("$PYTHON" -c 'import coa_envs; print(len(coa_envs.ids()))') envs registered)"

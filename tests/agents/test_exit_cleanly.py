"""Long-lived engines stop on close, on garbage collection and at interpreter exit, within bounded
waits, and a process never aborts at exit because a thread was still inside a forward pass.

``coa eval --agent llm --model smollm2-135m`` under load ended with "terminate called without an
active exception" (exit 134) instead of its status: episodes abandoned at their deadline left the
batching worker decoding, ``close()`` gave up after 30 s, and Python's finalization killed the
worker inside C++. Each scenario runs in its own interpreter, as the bug needs one to exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the [llm] extra")

ROOT = Path(__file__).resolve().parents[2]
ABORT = "terminate called"


def _python(code: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout_s, env=env, cwd=ROOT)


# A tiny engine decoding a long request on the batching worker when the program ends.
_DECODING = """
    import threading, time
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.batching import BatchingEngine
    from agents.engines.hf import HFEngine
    from agents.tiny import build_tiny_model, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer()
    inner = HFEngine(build_tiny_model(tokenizer, hidden_size=256, layers=4), tokenizer, max_context=100_000)
    inner.eos_ids = frozenset()  # the random model sampling EOS ended the request ok before close (CI)
    engine = BatchingEngine(inner)
    long = SamplingParams(max_new_tokens=100_000, temperature=1.0, stop=())
    request = GenerationRequest(token_ids=(1, 2, 3), params=long)
    result = {}
    caller = threading.Thread(target=lambda: result.update(c=engine.generate([request], long)[0]), daemon=True)
    caller.start()
    deadline = time.monotonic() + 120
    while not engine.batch_sizes and time.monotonic() < deadline:  # the worker took the request
        time.sleep(0.05)
    time.sleep(0.5)  # and is in the middle of decoding it
"""


def test_closing_a_batching_engine_mid_decode_answers_with_an_error_within_a_step():
    run = _python(_DECODING + """
    started = time.monotonic()
    engine.close()
    caller.join(timeout=120)
    print("closed in", round(time.monotonic() - started, 1), "s;", result["c"].error_kind, result["c"].error)
    assert not engine._worker.is_alive() and not result["c"].ok
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "the engine was closed" in run.stdout


def test_a_program_that_exits_while_the_engine_decodes_exits_cleanly():
    """No close(): the engine is stopped by its finalizer at exit, before Python finalizes."""
    run = _python(_DECODING + """
    print("leaving without close()")
    """)
    assert ABORT not in run.stderr
    assert run.returncode == 0, run.stderr[-3000:]


def test_an_engine_is_stopped_when_garbage_collected():
    run = _python("""
    import gc
    from agents.engines.batching import BatchingEngine
    from agents.engines.hf import HFEngine
    from agents.tiny import build_tiny_model, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer()
    engine = BatchingEngine(HFEngine(build_tiny_model(tokenizer), tokenizer))
    worker = engine._worker
    del engine
    gc.collect()
    worker.join(timeout=60)
    print("worker alive after collection:", worker.is_alive())
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "worker alive after collection: False" in run.stdout


def _eval_with_abandoned_episodes(out: Path) -> subprocess.CompletedProcess:
    """The issue's command, with every episode abandoned at a 2 s deadline while the model is
    still generating: the batching worker is decoding when the command ends."""
    command = [sys.executable, "-m", "coa_cli.main", "eval", "coa/SynthHop-v0", "--agent", "llm",
               "--model", "smollm2-135m", "--n", "1", "--concurrency", "1", "--max-turns", "1",
               "--max-new-tokens", "2000", "--episode-timeout", "2", "--no-plots", "--no-progress",
               "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.timeout(5400)  # 20 model loads beside a busy core (~2 min each on a loaded 2-core machine)
def test_coa_eval_with_smollm2_never_aborts_at_exit_under_a_busy_neighbour(smollm2_dir, tmp_path):
    """20 runs beside a process that keeps a core busy: each ends with its own status (3: every
    episode timed out, so the run measured nothing), never with the abort (134)."""
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for attempt in range(20):
            started = time.monotonic()
            run = _eval_with_abandoned_episodes(tmp_path / f"run{attempt}")
            assert ABORT not in run.stderr, (attempt, run.stderr[-2000:])
            assert run.returncode == 3, (attempt, run.returncode, run.stderr[-2000:])
            assert "error:timeout" in run.stdout + run.stderr
            print(f"run {attempt}: exit {run.returncode} in {time.monotonic() - started:.0f} s")
    finally:
        neighbour.kill()
        neighbour.wait()

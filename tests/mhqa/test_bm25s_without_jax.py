"""Building and searching an index never imports JAX (which would claim 75% of a GPU).

bm25s runs a JAX op at import time when JAX is installed; on the H100 that left an SFT run in
the same process out of memory. A stand-in ``jax`` package that records its import is put on
the path of a fresh interpreter, so the test needs no real JAX and fails if anything imports it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import gymnasium as gym
    import coa_envs  # noqa: F401
    from coa_envs.web.collection import LocalIndex
    from coa_envs.web.collection import Page

    env = gym.make("coa/SynthHop-v0", task_options={"num_tasks": 8, "split": "train"})
    env.reset(seed=0)
    _, _, _, _, info = env.step("<wiki_search>founder</wiki_search>")
    assert not info.get("error_kind"), info
    index = LocalIndex([Page(url="http://a.test/", title="Oslo", text="Oslo is a city.")])
    assert index.search("Oslo", 1)
    print("jax imported:", "jax" in sys.modules)
""")


def _run(tmp_path, prelude: str = "") -> subprocess.CompletedProcess:
    fake = tmp_path / "fake" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("from . import lax\n")
    (fake / "lax.py").write_text(  # a working top_k, for the process that chose JAX itself
        "import numpy as np\n"
        "def top_k(x, k):\n"
        "    order = np.argsort(-np.asarray(x), kind='stable')[..., :k]\n"
        "    return np.take_along_axis(np.asarray(x), order, -1), order\n")
    import os

    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), *sys.path])}
    return subprocess.run([sys.executable, "-c", prelude + SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)


def test_search_backends_do_not_import_jax(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "jax imported: False" in done.stdout


def test_a_process_that_imported_jax_keeps_it(tmp_path):
    done = _run(tmp_path, prelude="import jax\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "jax imported: True" in done.stdout

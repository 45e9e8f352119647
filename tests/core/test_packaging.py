"""A non-editable install registers the same ids as the checkout and stays light to import."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import coa_envs

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_registry_and_data_and_registers_the_same_ids(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("coa_envs-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "coa_envs" / "envs_registry.yaml").is_file()
    code = (
        "import json, sys, gymnasium as gym, coa_envs;"
        "e = gym.make('coa/AIME24-v1'); obs = e.reset(seed=0)[0];"
        "print(json.dumps({'file': coa_envs.__file__, 'ids': coa_envs.ids(), 'torch': 'torch' in sys.modules,"
        " 'obs': obs[-80:]}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        check=True, capture_output=True, text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(str(site))
    assert result["ids"] == coa_envs.ids()
    assert result["torch"] is False
    assert "hexagon" in result["obs"]

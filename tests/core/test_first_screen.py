"""The newcomer's first screen is the product: the set-up command and the README's first evals
print a few lines besides the scores, not hundreds of lines of apt unpacking, pip chatter,
progress bars and deprecation warnings."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from coa_cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SCREEN = 25  # lines


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/usr/bin/env bash\n" + body, encoding="utf-8")
    path.chmod(0o755)


def _verbose_machine(tmp_path: Path, *, fail_pip: bool = False) -> dict[str, str]:
    """apt, dpkg, sudo and a python whose pip talk as much as the real ones (and record what ran)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    chatter = 'for i in $(seq 1 300); do echo "Unpacking package-$i (1.0) over (0.9) ..."; done\n'
    _stub(bin_dir, "apt-get", f'echo "apt-get $*" >> {tmp_path}/ran\n{chatter}')
    _stub(bin_dir, "dpkg", "exit 1\n")  # every package missing
    _stub(bin_dir, "sudo", '"$@"\n')
    _stub(bin_dir, "fake-python", f"""echo "python $*" >> {tmp_path}/ran
case "$*" in
  *"import sys, torch"*) exit 1 ;;  # not a CUDA build
  *"import coa_envs"*) echo 20; exit 0 ;;
esac
for i in $(seq 1 200); do echo "Collecting thing-$i"; echo "WARNING: Running pip as the 'root' user" >&2; done
{"exit 1" if fail_pip else "exit 0"}
""")
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "fake-python"),
            "COA_SETUP_LOG": str(tmp_path / "setup.log")}


def test_setup_prints_a_screen_not_the_package_managers_output(tmp_path):
    run = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True,
                         env=_verbose_machine(tmp_path), timeout=120)
    assert run.returncode == 0, run.stderr
    printed = (run.stdout + run.stderr).splitlines()
    assert len(printed) <= 8, printed
    assert printed[-1] == "setup: done (20 envs registered)"
    assert "Unpacking" not in run.stdout + run.stderr and "Collecting" not in run.stdout + run.stderr
    ran = (tmp_path / "ran").read_text()  # the steps still ran, their output in the log
    assert "apt-get install" in ran and "torch==2.13.0" in ran and "-e .[dev,all,docs]" in ran
    assert "Unpacking package-300" in (tmp_path / "setup.log").read_text()


def test_a_failing_step_shows_the_end_of_its_log(tmp_path):
    run = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True,
                         env=_verbose_machine(tmp_path, fail_pip=True), timeout=120)
    assert run.returncode != 0
    assert "setup: failed:" in run.stderr and "Collecting thing-200" in run.stderr  # the tail, not all of it
    assert len(run.stderr.splitlines()) <= 30


def test_the_first_eval_prints_its_table_and_little_else_when_piped(tmp_path):
    result = CliRunner().invoke(app, ["eval", "coa/MATH500-v1", "--agent", "oracle", "--n", "20",
                                      "--out", str(tmp_path / "quickstart")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) <= SCREEN + 10, result.output  # the table is ~30 lines; no progress bar
    assert "━━━━━━━━━━━━━━━━━━━━ 100%" not in result.output and "reward 1.000 · errors" not in result.output
    assert any("accuracy" in line and "1.000" in line for line in lines)

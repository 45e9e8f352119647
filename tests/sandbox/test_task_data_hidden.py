"""Shipped task files carry gold answers: no run may read them, whatever the install mode.

An editable install leaves the package in a checkout, which the allowlist root never holds. A
regular (non-editable) install puts ``coa_envs/data/**`` into site-packages, inside the
interpreter's prefix, which the root *does* hold read-only: the project's own packages are
therefore hidden from runs wherever they sit. Checked with a real wheel installed into a venv
and with ``pip install --target``, on every jailing backend present, and for the editable
install this checkout is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import Limits, Status
from tests.sandbox.jails import CHECKOUT

BACKENDS = ("pool", "bwrap", "nsjail")

PROBE = r"""
import importlib.util, json, os, sys
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
import sandbox
from sandbox import Limits
from sandbox.backends import BackendUnavailable, get_backend
package = os.path.dirname(importlib.util.find_spec("coa_envs").origin)
if len(sys.argv) > 3:  # another copy's package directory to attack (one find_spec does not find)
    package = sys.argv[3]
data = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(package, "data")) for f in fs]
attack = '''
import json, os
found = {}
for path in json.loads(PATHS):
    try:
        with open(path, "rb") as handle:
            found[path] = len(handle.read())
    except OSError as exc:
        pass
listing = {}
for path in json.loads(DIRS):
    try:
        listing[path] = sorted(os.listdir(path))
    except OSError:
        pass
print(json.dumps({"read": found, "listed": listing}))
'''.replace("PATHS", repr(json.dumps(data))).replace("DIRS", repr(json.dumps([package, os.path.join(package, "data")])))
report = {"sandbox": sandbox.__file__, "package": package, "files": len(data), "runs": {}}
for name in sys.argv[2].split(","):
    try:
        backend = get_backend(name, **({"size": 1, "preload": ()} if name == "pool" else {}))
    except BackendUnavailable as exc:
        report["runs"][name] = {"skipped": str(exc)}
        continue
    result = backend.run(attack, limits=Limits(cpu_s=10, wall_s=20))
    report["runs"][name] = {"status": str(result.status), "stdout": result.stdout, "stderr": result.stderr[-500:]}
    backend.close()
print(json.dumps(report))
"""


def _copy_source(target: Path) -> Path:
    """The project's buildable files, so that building does not write into the checkout."""
    source = target / "src"
    source.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (CHECKOUT / name).exists():
            shutil.copy2(CHECKOUT / name, source / name)
    for package in ("coa_envs", "agents", "trainers", "sandbox", "coa_cli", "coa_verifiers"):
        if (CHECKOUT / package).is_dir():
            shutil.copytree(CHECKOUT / package, source / package, ignore=ignore)
    return source


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    source = _copy_source(base)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                          str(base / "dist"), str(source)], capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0:
        pytest.skip(f"cannot build the project's wheel here: {out.stderr[-300:]}")
    return next((base / "dist").glob("coa_envs-*.whl"))


def _probe(python: str, path_entry: str, cwd: Path, attacked: str | None = None) -> dict:
    """Run :data:`PROBE` with ``python`` from ``cwd`` (not the checkout: ``-c`` puts the working
    directory on ``sys.path``) and no PYTHONPATH, so that the installed copy is imported
    (``attacked``: the package directory whose task files the runs try, if not that one)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root"}
    argv = [python, "-c", PROBE, path_entry, ",".join(BACKENDS), *([attacked] if attacked else [])]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=cwd, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def _assert_hidden(report: dict, installed_under: str) -> None:
    assert report["sandbox"].startswith(installed_under), report["sandbox"]  # the installed copy ran
    assert report["package"].startswith(installed_under) and report["files"] > 0, report
    ran = 0
    for name, run in report["runs"].items():
        if "skipped" in run:
            continue
        ran += 1
        assert run["status"] == Status.OK, (name, run)
        seen = json.loads(run["stdout"])
        assert seen["read"] == {}, (name, sorted(seen["read"])[:5])
        assert all(not entries or "data" not in entries for entries in seen["listed"].values()), (name, seen)
    assert ran, report["runs"]


def _venv_with(wheel, tmp_path) -> tuple[Path, str]:
    """A venv (system site-packages visible) holding ``wheel``: a real non-editable install."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                   check=True, timeout=300, capture_output=True)
    return venv, python


def test_a_wheel_installed_in_a_venv_keeps_its_task_files_from_runs(wheel, tmp_path):
    venv, python = _venv_with(wheel, tmp_path)
    _assert_hidden(_probe(python, "", tmp_path), str(venv))


def test_an_installed_copy_shadowed_by_a_checkout_keeps_its_task_files_from_runs(wheel, tmp_path):
    """A wheel in the venv's site-packages and a checkout ahead of it on ``sys.path`` (a developer
    who installed the project once, then works from a checkout): the sandbox imports the
    checkout's copy, and the installed one, inside the prefix every run sees, was left readable
    (only the copy an import finds was hidden)."""
    venv, python = _venv_with(wheel, tmp_path)
    installed = subprocess.run([python, "-I", "-c", "import coa_envs, os; print(os.path.dirname(coa_envs.__file__))"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert installed.startswith(str(venv)), installed
    report = _probe(python, str(CHECKOUT), tmp_path, attacked=installed)
    assert report["sandbox"].startswith(str(CHECKOUT)), report["sandbox"]  # the checkout's copy ran
    assert report["package"] == installed and report["files"] > 0, report
    ran = 0
    for name, run in report["runs"].items():
        if "skipped" not in run:
            ran += 1
            assert run["status"] == Status.OK, (name, run)
            assert json.loads(run["stdout"])["read"] == {}, (name, run["stdout"][:300])
    assert ran, report["runs"]


def test_a_target_directory_install_keeps_its_task_files_from_runs(wheel, tmp_path):
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True, timeout=300, capture_output=True)
    _assert_hidden(_probe(sys.executable, str(target), tmp_path), str(target))


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_editable_checkout_keeps_its_task_files_from_runs(kind):
    from tests.sandbox.jails import jail_backend

    backend = jail_backend(kind)
    locations = {str(CHECKOUT / "coa_envs")}
    spec = importlib.util.find_spec("coa_envs")
    if spec is not None and spec.origin:
        locations.add(os.path.dirname(spec.origin))
    files = [os.path.join(d, f) for location in locations for d, _, fs in os.walk(os.path.join(location, "data"))
             for f in fs][:400]
    assert files
    code = ("import json\nfound = []\nfor path in json.loads(PATHS):\n    try:\n        open(path, 'rb').read(1)\n"
            "        found.append(path)\n    except OSError:\n        pass\nprint(json.dumps(found))")
    result = backend.run(code.replace("PATHS", repr(json.dumps(files))), limits=Limits(cpu_s=10, wall_s=20))
    assert (result.status, json.loads(result.stdout or "null")) == (Status.OK, []), result

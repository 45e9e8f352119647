"""The accounting mode is chosen, never fallen into; uid leases; the checks on an end record.

Where no cgroup can be made, the pool, bwrap, nsjail and sessions refuse to start and say how
to opt into per-process limits; with the opt-in they start and say which mode they are in.
"""

from __future__ import annotations

import math
import re
import shutil
import tomllib

import pytest

import sandbox
from sandbox import _accounting, _uids
from sandbox._cgroup import CgroupUnavailable
from sandbox._collect import split_end_record
from sandbox._harness import END_RECORD, STATUS_END
from sandbox._root import PROJECT_PACKAGES
from sandbox.backends import BackendUnavailable, get_backend
from tests.sandbox.jails import CHECKOUT


@pytest.fixture()
def no_cgroups(monkeypatch):
    def unavailable():
        raise CgroupUnavailable("no cgroup v2 with the memory/pids controllers and no cgroup v1 hierarchy (test)")

    monkeypatch.setattr(_accounting, "sandbox_root", unavailable)
    monkeypatch.delenv("COA_SANDBOX_ACCOUNTING", raising=False)


@pytest.mark.parametrize("kind", ["pool", "bwrap", "nsjail"])
def test_without_cgroups_a_jailing_backend_refuses_and_says_how_to_opt_in(kind, no_cgroups):
    if kind == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    options = {"size": 1, "preload": ()} if kind == "pool" else {}
    with pytest.raises(BackendUnavailable) as refused:
        get_backend(kind, **options)
    if "not installed" in str(refused.value):
        pytest.skip(str(refused.value))
    assert "accounting='process'" in str(refused.value) and "COA_SANDBOX_ACCOUNTING" in str(refused.value)
    backend = get_backend(kind, accounting="process", **options)
    try:
        assert any("per-process limits" in layer for layer in backend.isolation)
        assert backend.run("print(6 * 7)").stdout == "42\n"
    finally:
        backend.close()


def test_without_cgroups_a_session_refuses_and_the_env_variable_opts_in(no_cgroups, monkeypatch):
    with pytest.raises(BackendUnavailable, match="accounting='process'"):
        sandbox.Session(preload=(), warm_spare=False)
    monkeypatch.setenv("COA_SANDBOX_ACCOUNTING", "process")
    with sandbox.Session(preload=(), warm_spare=False) as session:
        assert any("per-process limits" in layer for layer in session.isolation)
        assert session.run("x = 2").status is sandbox.Status.OK
        assert session.run("print(x * 21)").stdout == "42\n"


def test_an_unknown_accounting_mode_is_an_error():
    with pytest.raises(ValueError, match="cgroup"):
        _accounting.resolve_accounting("per-run")


def test_the_default_backend_says_it_uses_a_cgroup_per_run(pool):
    assert any(layer.startswith("cgroup v") and "per run" in layer for layer in pool.isolation), pool.isolation


# -- uid leases ----------------------------------------------------------------------------------
def test_uid_leases_are_disjoint_and_given_back():
    if _uids.os.geteuid() != 0:
        pytest.skip("only root hands runs other uids")
    first, second = _uids.lease_uids(300), _uids.lease_uids(1)
    try:
        assert len(set(first.uids)) == 300 and not set(first.uids) & set(second.uids)
        assert all(uid >= _uids.BASE for uid in first.uids + second.uids)
    finally:
        first.release()
        second.release()


def test_a_uid_given_back_is_the_last_one_taken_again():
    """A finished run's uid waits behind every other free one: processes of its run still being
    reaped must not count against the next run's RLIMIT_NPROC."""
    if _uids.os.geteuid() != 0:
        pytest.skip("only root hands runs other uids")
    pool = _uids.UidPool()
    try:
        first = pool.take()
        pool.give_back(first)
        taken = [pool.take() for _ in range(_uids.BLOCK - 1)]
        assert first not in taken and len(set(taken)) == _uids.BLOCK - 1
        assert pool.take() == first
    finally:
        pool.release()


def test_a_block_some_process_runs_as_is_never_leased(monkeypatch):
    if _uids.os.geteuid() != 0:
        pytest.skip("only root hands runs other uids")
    busy = {_uids.BASE + block * _uids.BLOCK + 7 for block in range(_uids.BLOCKS - 1)}
    monkeypatch.setattr(_uids, "_uids_in_use", lambda: busy)
    lease = _uids.lease_uids(2)
    try:
        assert lease.uids[0] == _uids.BASE + (_uids.BLOCKS - 1) * _uids.BLOCK  # the only free block
    finally:
        lease.release()


# -- end records ---------------------------------------------------------------------------------
@pytest.mark.parametrize("rc, cpu", [(0, math.nan), (0, -0.5), (0, math.inf), (0, 1e300), (256, 0.1), (-1, 0.1)])
def test_an_end_record_with_impossible_figures_is_no_end_record(rc, cpu):
    record = END_RECORD.pack(STATUS_END, rc, cpu)
    assert split_end_record(b"M" + record) == (b"M" + record, None)  # its bytes count against the forger only


def test_a_good_end_record_after_a_bad_one_still_counts():
    bad, good = END_RECORD.pack(STATUS_END, 0, math.nan), END_RECORD.pack(STATUS_END, 3, 0.25)
    assert split_end_record(bad + good) == (bad, (3, 0.25))


# -- the project's packages, hidden from runs ----------------------------------------------------
def test_the_hidden_packages_are_the_ones_the_project_ships():
    config = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = {re.sub(r"\*$", "", pattern) for pattern in include}
    assert shipped == set(PROJECT_PACKAGES)

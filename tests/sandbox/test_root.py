"""The allowlist root's contents and the checks on granted paths (no jail needed)."""

from __future__ import annotations

import os
import sys
import sysconfig

import pytest

from sandbox import Grants
from sandbox._root import _elf_interpreter, link_chain, root_policy


def test_link_chain_records_every_symlink_on_the_way(tmp_path):
    (tmp_path / "real" / "lib").mkdir(parents=True)
    (tmp_path / "real" / "lib" / "libx.so").write_text("")
    (tmp_path / "lib").symlink_to("real/lib")
    (tmp_path / "real" / "lib" / "alias.so").symlink_to(tmp_path / "real" / "lib" / "libx.so")
    links, real = link_chain(str(tmp_path / "lib" / "alias.so"))
    assert real == str(tmp_path / "real" / "lib" / "libx.so")
    assert links == [(str(tmp_path / "lib"), "real/lib"), (str(tmp_path / "real" / "lib" / "alias.so"),
                                                            str(tmp_path / "real" / "lib" / "libx.so"))]


def test_policy_keeps_the_interpreter_and_its_libraries_and_nothing_else():
    policy = root_policy()
    kept = set(policy.read_only)
    assert sys.prefix in kept or any(sys.prefix.startswith(k + "/") for k in kept)
    assert os.path.realpath(os.path.dirname(os.__file__)).startswith(tuple(kept))  # the stdlib
    for host_path in ("/etc", "/home", "/root", "/opt", "/srv", "/var", "/run", "/usr", "/usr/bin", "/"):
        assert host_path not in kept
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert not any(checkout.startswith(k + "/") or checkout == k for k in kept)  # not the project
    loader = _elf_interpreter(os.path.realpath(sys.executable))
    if loader:  # the ELF loader resolves in the jail, through the same links as on the host
        links, real = link_chain(loader)
        assert any(real.startswith(k + "/") or real == k for k in kept)
        assert set(links) <= set(policy.symlinks) | {link for link in links if any(link[0].startswith(k + "/")
                                                                                   for k in kept)}
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch and os.path.isdir(f"/usr/lib/{multiarch}"):
        assert os.path.realpath(f"/usr/lib/{multiarch}") in kept


def test_grants_are_added_and_checked_when_configured(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    policy = root_policy(grants=Grants((str(data),), (str(out),)))
    assert str(data) in policy.read_only and policy.writable == (str(out),)
    interpreter = {p for p in {sys.prefix, sys.base_prefix} if p.startswith("/tmp/")}  # a venv under /tmp
    below = tuple(entry for entry in policy.below_scratch() if entry[0] not in interpreter)
    assert below == ((str(data), False), (str(out), True)) or not str(tmp_path).startswith("/tmp/")


@pytest.mark.parametrize(
    ("read_only", "writable", "message"),
    [
        (["relative/path"], [], "not an absolute path"),
        (["/no/such/dir/anywhere"], [], "does not exist"),
        (["/"], [], "whole host"),
        (["/proc/self"], [], "not allowed"),
        (["/sys"], [], "not allowed"),
        (["/dev/sda"], [], "not allowed"),
        (["/tmp"], [], "private /tmp"),
        (["/tmp/work/x"], [], "not allowed"),
        (["/usr/../etc"], [], "write '/usr/../etc' as '/etc'"),
        ("/etc", [], "must be a list"),
        (["/etc"], ["/etc"], "both read-only and writable"),
    ],
)
def test_a_grant_that_is_not_allowed_is_a_clear_error(read_only, writable, message):
    with pytest.raises(ValueError, match=message):
        Grants(read_only, writable)


@pytest.mark.parametrize("where", ["prefix", "parent", "site-packages"])
def test_a_writable_grant_over_the_interpreter_is_refused(where):
    """Equal to, containing or inside the interpreter's files: later runs and the host use them."""
    target = {"prefix": sys.prefix, "parent": os.path.dirname(sys.prefix.rstrip("/")) or "/usr",
              "site-packages": sysconfig.get_paths()["purelib"]}[where]
    if target in ("/", "/tmp"):
        pytest.skip(f"{target} is refused for another reason")
    with pytest.raises(ValueError, match="interpreter's files"):
        root_policy(grants=Grants((), (target,)))

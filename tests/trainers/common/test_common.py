"""The plumbing every trainer shares: config loader, checkpointer, metrics logger."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import random
import re
from dataclasses import dataclass, field
from typing import Literal

import pytest

from trainers.common import Checkpointer, ConfigError, MetricsLogger, check_fields, load_config, read_metrics


@dataclass
class _Inner:
    learning_rate: float = 1e-3
    steps: int = 1
    mode: Literal["a", "b"] = "a"

    def __post_init__(self) -> None:
        check_fields(self, "inner.")


@dataclass
class _Outer:
    inner: _Inner = field(default_factory=_Inner)
    extra: dict = field(default_factory=dict)
    name: str = "x"


def test_exponent_floats_without_a_dot_are_numbers_everywhere(tmp_path):
    """YAML 1.1 reads ``2e-5`` as a string; every trainer's docs write it that way."""
    path = tmp_path / "c.yaml"
    path.write_text("inner: {learning_rate: 2e-5, steps: 1e3}\nextra: {nested: {lr: 5e-3}}\n")
    cfg = load_config(_Outer, path, ["inner.learning_rate=3E-4"])
    assert cfg.inner.learning_rate == 3e-4 and cfg.inner.steps == 1000
    assert isinstance(cfg.inner.steps, int)
    assert load_config(_Outer, path).extra == {"nested": {"lr": 5e-3}}  # plain mappings too
    assert load_config(_Outer, values={"name": "2e-5x"}).name == "2e-5x"  # strings stay strings
    assert _Inner(learning_rate="2e-5").learning_rate == 2e-5  # built in Python


@pytest.mark.parametrize(("overrides", "message"), [
    (["inner.mode=c"], "inner.mode='c': choose one of 'a', 'b'"),
    (["inner.learning_rate=fast"], "inner.learning_rate='fast': must be a number"),
    (["inner.steps=1.5"], "inner.steps=1.5: must be an integer"),
    (["inner.stepz=1"], "unknown key 'inner.stepz' in section 'inner'; known keys: "
                        "['learning_rate', 'mode', 'steps']"),
    (["inner=3"], "inner is a section"),
    (["lr=1"], "lr moved to inner.learning_rate"),
    (["inner.steps"], "write it as key=value"),
])
def test_one_error_type_naming_the_key_and_the_choices(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(_Outer, overrides=overrides, moved={"lr": "inner.learning_rate"})


def test_later_sources_win_and_mappings_merge(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("inner: {steps: 2, mode: b}\nextra: {a: 1}\n")
    cfg = load_config(_Outer, path, ["extra.b=2", "inner.steps=4"], values={"inner.steps": 3})
    assert cfg.inner.steps == 4 and cfg.inner.mode == "b" and cfg.extra == {"a": 1, "b": 2}


# -- checkpointer ------------------------------------------------------------------------
def _write(marker: str):
    return lambda directory: (directory / "weights.txt").write_text(marker)


def test_checkpoints_are_atomic_rotated_and_torn_ones_are_never_resumed(tmp_path):
    checkpoints = Checkpointer(tmp_path, keep=2)
    assert checkpoints.resolve("latest") is None  # a first run with resume=latest starts fresh
    for step in (2, 4, 10):
        path = checkpoints.save(step, _write(str(step)), {"cursor": step * 3})
        assert path.name == f"checkpoint-{step}"
    # kept: the newest two, by step number (checkpoint-10 sorts before -2 as text)
    assert [p.name for p in checkpoints.complete()] == ["checkpoint-4", "checkpoint-10"]
    assert checkpoints.read_state(checkpoints.latest()) == {"step": 10, "cursor": 30}
    # a save killed half way: files written, no marker, still under its temporary name or not
    (tmp_path / ".tmp-checkpoint-12").mkdir()
    torn = tmp_path / "checkpoint-14"
    torn.mkdir()
    (torn / "weights.txt").write_text("half")
    assert checkpoints.resolve("latest").name == "checkpoint-10"
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        checkpoints.resolve(str(torn))
    checkpoints.save(16, _write("16"))
    assert not (tmp_path / ".tmp-checkpoint-12").exists()  # stale staging swept
    assert Checkpointer(tmp_path, keep=0).resolve(str(tmp_path / "checkpoint-16")).is_dir()


def test_rng_streams_continue_exactly_after_restore(tmp_path):
    import numpy as np
    import torch

    checkpoints = Checkpointer(tmp_path)
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    path = checkpoints.save(1, lambda d: None)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    checkpoints.restore_rng(path)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
    saved = torch.load(path / "rng.pt", weights_only=False)
    assert ("cuda" in saved) == torch.cuda.is_available()  # every CUDA device's stream too


# -- metrics -------------------------------------------------------------------------------
def test_metrics_resume_keeps_the_steps_up_to_the_checkpoint(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for step in range(1, 6):
        logger.log(step, {"loss": float(step)})
    logger.close()
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"step": 6, "lo')  # killed mid-write
    resumed = MetricsLogger(tmp_path, tensorboard=False, resume_step=3)
    resumed.log(4, {"loss": 40.0})
    resumed.close()
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "metrics.jsonl")] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    MetricsLogger(tmp_path, tensorboard=False).close()  # a fresh run starts a new file
    assert read_metrics(tmp_path / "metrics.jsonl") == []


def test_metrics_mirror_to_tensorboard(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard (extra: train) is not installed")
    logger = MetricsLogger(tmp_path, tag_prefix="sft/")
    logger.log(1, {"loss": 0.5, "note": "text is JSONL-only"})
    logger.close()
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and os.path.getsize(events[0]) > 0
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["note"] == "text is JSONL-only"


def test_other_ranks_write_nothing(tmp_path):
    logger = MetricsLogger(tmp_path / "rank1", enabled=False)
    logger.log(1, {"loss": 1.0})
    logger.close()
    assert not (tmp_path / "rank1").exists()


# -- the configs built on it ---------------------------------------------------------------
def test_every_config_field_is_documented():
    """Each section field carries a docstring in its class body (how users learn the keys)."""
    from trainers.common import sections as common_sections
    from trainers.rl import config as rl_config
    from trainers.rl import sections as rl_sections
    from trainers.sft import config as sft_config

    checked = 0
    for module in (common_sections, rl_sections, rl_config, sft_config):
        tree = ast.parse(inspect.getsource(module))
        for node in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            cls = getattr(module, node.name)
            if not dataclasses.is_dataclass(cls):
                continue
            inherited = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base)
                         for f in dataclasses.fields(base)}
            for index, item in enumerate(node.body):
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                following = node.body[index + 1] if index + 1 < len(node.body) else None
                documented = isinstance(following, ast.Expr) and isinstance(
                    following.value, ast.Constant)
                assert documented or item.target.id in inherited, \
                    f"{node.name}.{item.target.id} lacks a docstring"
                checked += 1
    assert checked > 90

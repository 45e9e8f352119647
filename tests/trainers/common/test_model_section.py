"""One model section and one loader for SFT, DPO and RL; renamed keys keep working for a release."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trainers.common import ConfigError
from trainers.common.model import ModelSection, PackedModelSection

ROOT = Path(__file__).resolve().parents[3]


def test_every_trainer_reads_the_same_model_section():
    from trainers.dpo.config import load_config as load_dpo
    from trainers.rl.config import load_config as load_rl
    from trainers.sft.config import load_config as load_sft

    values = {"model": {"path": "tiny", "tiny": {"hidden_size": 32, "layers": 1}, "lora": {"r": 4}}}
    sft = load_sft(values={**values, "data": {"train_path": "x.jsonl"}}).model
    dpo = load_dpo(values={**values, "data": {"train_path": "p.jsonl"}}).model
    rl = load_rl(values=values).model
    for model in (sft, dpo, rl):
        assert isinstance(model, ModelSection)
        assert model.tiny["hidden_size"] == 32 and model.tiny["vocab_size"] == 512 and model.lora.r == 4
    assert isinstance(sft, PackedModelSection) and isinstance(dpo, PackedModelSection)


def test_rl_config_overrides_moved_to_tiny_and_random_init_keep_working():
    from trainers.rl.config import load_config

    with pytest.warns(FutureWarning, match=re.escape("moved to model.tiny")):
        cfg = load_config(values={"model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}}})
    assert cfg.model.tiny["hidden_size"] == 32 and cfg.model.config_overrides == {}
    with pytest.warns(FutureWarning, match=re.escape("moved to model.random_init")):
        cfg = load_config(values={"model": {"path": "some/model",
                                            "config_overrides": {"random_init": True, "num_hidden_layers": 1}}})
    assert cfg.model.random_init and cfg.model.config_overrides == {"num_hidden_layers": 1}
    with pytest.raises(ConfigError, match=re.escape("keep model.tiny")):
        load_config(values={"model": {"config_overrides": {"layers": 1}, "tiny": {"layers": 2}}})
    with pytest.raises(ConfigError, match=re.escape("set model.random_init=true")):
        load_config(values={"model": {"path": "some/model", "config_overrides": {"num_hidden_layers": 1}}})


def test_sft_lora_without_a_rank_keeps_its_old_meaning_with_a_message():
    from trainers.sft.config import load_config

    with pytest.warns(FutureWarning, match="model.lora without r"):
        cfg = load_config(values={"data.train_path": "x.jsonl", "model.lora": {"alpha": 16}})
    assert cfg.model.lora.r == 16 and cfg.model.lora.enabled
    off = load_config(values={"data.train_path": "x.jsonl", "model.lora": None})
    assert not off.model.lora.enabled  # `lora: null`, the old "no LoRA"


def test_the_rl_loop_refuses_a_warm_start_it_does_not_run(tmp_path):
    from trainers.rl.config import load_config
    from trainers.rl.loop import train

    cfg = load_config(values={"model.warm_start.episodes": 4, "bookkeeping.output_dir": str(tmp_path),
                              "resources.use_ray": False})
    with pytest.raises(ConfigError, match=re.escape("trainers.rl.train")):
        train(cfg)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return found | {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}


@pytest.mark.parametrize("trainer", ["dpo", "rl"])
def test_dpo_and_rl_reach_sft_only_through_its_public_api(trainer):
    """Shared plumbing lives in trainers/common; DPO needs nothing of SFT, RL's warm start only
    its public face (``trainers.sft``: load_config + train)."""
    for path in sorted((ROOT / "trainers" / trainer).glob("*.py")):
        inner = {name for name in _imports(path) if name.startswith("trainers.sft.")}
        assert not inner, f"{path.name} imports {inner}"
        if trainer == "dpo":
            assert "trainers.sft" not in _imports(path), path.name

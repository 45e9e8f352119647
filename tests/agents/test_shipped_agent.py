"""The shipped trained agent ``smollm2-135m-coa``: its adapter, its provenance, and that it beats the base.

The default-run tests read the adapter shipped in ``agents/trained/`` (size, rank, base,
tensor shapes against the base's architecture), load it with peft over a model of the
base's architecture, and read its ``provenance.json`` (the recipe config it came from,
seeds, the commit, held-out figures that equal the committed report's). The slow test plays
the base and the agent on the same held-out tasks with ``coa compare``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agents.trained import TRAINED, adapter_dir, provenance

ROOT = Path(__file__).resolve().parents[2]
NAME = "smollm2-135m-coa"
REPORT = ROOT / "docs" / "figures" / "recipe_smollm2_cpu" / "report.json"
MARGIN = 0.2
"""How much more of the 20 held-out tasks the agent must solve than the base (fixed before the
shipped run's figures were known: the recipe's SFT target is +0.30 on 40 tasks)."""
# SmolLM2-135M: 30 layers, hidden 576, 9 query / 3 key-value heads of 64, MLP 1536
SHAPES = {"q_proj": (576, 576), "k_proj": (192, 576), "v_proj": (192, 576), "o_proj": (576, 576),
          "gate_proj": (1536, 576), "up_proj": (1536, 576), "down_proj": (576, 1536)}


def test_the_shipped_adapter_is_small_and_fits_its_base():
    pytest.importorskip("safetensors")
    from safetensors import safe_open

    assert TRAINED[NAME].base == "smollm2-135m"
    directory = adapter_dir(NAME)
    weights = directory / "adapter_model.safetensors"
    assert weights.stat().st_size <= 5_000_000
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["base_model_name_or_path"] == "smollm2-135m"
    rank = config["r"]
    seen = set()
    with safe_open(str(weights), "pt") as handle:
        for key in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
            match = re.fullmatch(r"base_model\.model\.model\.layers\.(\d+)\.\w+\.(\w+)\.lora_([AB])\.weight", key)
            assert match, key
            layer, module, side = int(match.group(1)), match.group(2), match.group(3)
            out_dim, in_dim = SHAPES[module]
            expected = (rank, in_dim) if side == "A" else (out_dim, rank)
            assert tuple(handle.get_slice(key).get_shape()) == expected, key
            seen.add((layer, module))
    assert seen == {(layer, module) for layer in range(30) for module in SHAPES}


def test_the_agent_name_resolves_to_its_base_with_the_shipped_adapter_merged(smollm2_dir):
    """What ``--model smollm2-135m-coa`` runs: the base plus exactly the shipped adapter's delta."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    from agents.models import resolve_model
    from agents.trained import _digest

    merged = Path(resolve_model(NAME))
    assert json.loads((merged / "coa_model.json").read_text())["adapter_sha256"] == _digest(adapter_dir(NAME))
    config = json.loads((adapter_dir(NAME) / "adapter_config.json").read_text())
    adapter = load_file(str(adapter_dir(NAME) / "adapter_model.safetensors"))
    ours, base = load_file(str(merged / "model.safetensors")), load_file(str(Path(smollm2_dir) / "model.safetensors"))
    for layer, module in ((0, "self_attn.q_proj"), (29, "mlp.down_proj")):
        prefix = f"base_model.model.model.layers.{layer}.{module}"
        delta = adapter[f"{prefix}.lora_B.weight"].float() @ adapter[f"{prefix}.lora_A.weight"].float()
        key = f"model.layers.{layer}.{module}.weight"
        change = ours[key] - base[key]
        assert torch.allclose(change, delta * config["lora_alpha"] / config["r"], atol=1e-5), key
        assert change.abs().max() > 0, key


def test_the_provenance_names_the_recipe_seed_commit_and_held_out_figures():
    from coa_cli.recipe.config import RecipeConfig

    record = provenance(NAME)
    config = RecipeConfig(**record["recipe"])  # the recipe it came from is a valid recipe
    assert config.model == TRAINED[NAME].base == record["model"]
    assert config.export.rank == json.loads((adapter_dir(NAME) / "adapter_config.json").read_text())["r"]
    assert len(record["eval_seeds"]) >= 2 and set(record["training_seeds"]) == {"sft", "rl"}
    assert record["commits"] and all(re.fullmatch(r"[0-9a-f]{40}", c) for c in record["commits"])
    assert record["dirty_tree"] is False
    assert record["extraction"]["energy_kept"] > 0.99 and record["extraction"]["dropped_delta_norm"] == {}
    sets = {s.name: s.n for s in config.envs} | {"primary": config.heldout_tasks}
    report = json.loads(REPORT.read_text())  # the committed report of the same run
    assert report["complete"] and report["runs"][0]["commit"] in record["commits"]
    for env in ("primary", "miniweb"):
        assert record["heldout"][env] == report["evals"][env]
        for stage in ("baseline", "SFT", "RL"):
            figure = record["heldout"][env][stage]
            assert 0.0 <= figure["ci95"][0] <= figure["accuracy"] <= figure["ci95"][1] <= 1.0
            assert figure["tasks"] == sets[env]
    assert record["heldout"]["primary"]["RL"]["accuracy"] > record["heldout"]["primary"]["baseline"]["accuracy"]


@pytest.mark.slow
@pytest.mark.timeout(2400)  # 40 episodes of two real models on CPU: past the suite's 600 s on a busy host
def test_the_shipped_agent_beats_the_base_on_held_out_tasks(smollm2_dir, tmp_path):
    """The README's first command, on 20 held-out multi-hop tasks: the agent solves clearly more."""
    from typer.testing import CliRunner

    from coa_cli.main import app

    out = tmp_path / "compare"
    result = CliRunner().invoke(app, ["compare", "--recipe", str(ROOT / "examples" / "recipe_smollm2_cpu.yaml"),
                                      "-m", "smollm2-135m", "-m", NAME, "--n", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    scores = json.loads((out / "compare.json").read_text())["sets"]["primary"]
    assert scores[NAME]["accuracy"] >= scores["smollm2-135m"]["accuracy"] + MARGIN, scores
    episodes = [json.loads(line) for line in (out / "primary" / NAME / "trajectories.jsonl").read_text().splitlines()]
    assert sum(e["reward"] >= 1.0 for e in episodes) >= 1

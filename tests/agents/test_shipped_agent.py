"""The shipped trained agent ``smollm2-135m-coa``: its adapter, its provenance, and that it beats the base.

The default-run test reads the adapter shipped in ``agents/trained/`` (size, rank, base,
tensor shapes against the base's architecture) and its ``provenance.json`` (the recipe config
it came from, seeds, the commit, held-out figures that match the committed report). The slow
test plays the base and the agent on the same held-out tasks with ``coa compare``.
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
    # SmolLM2-135M: 30 layers, hidden 576, 3 key/value heads of 64, MLP 1536
    shapes = {"q_proj": (576, 576), "k_proj": (192, 576), "v_proj": (192, 576), "o_proj": (576, 576),
              "gate_proj": (1536, 576), "up_proj": (1536, 576), "down_proj": (576, 1536)}
    seen = set()
    with safe_open(str(weights), "pt") as handle:
        for key in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
            match = re.fullmatch(r"base_model\.model\.model\.layers\.(\d+)\.\w+\.(\w+)\.lora_([AB])\.weight", key)
            assert match, key
            layer, module, side = int(match.group(1)), match.group(2), match.group(3)
            out_dim, in_dim = shapes[module]
            expected = (rank, in_dim) if side == "A" else (out_dim, rank)
            assert tuple(handle.get_slice(key).get_shape()) == expected, key
            seen.add((layer, module))
    assert seen == {(layer, module) for layer in range(30) for module in shapes}


def test_the_provenance_names_the_recipe_seed_commit_and_held_out_figures():
    from coa_cli.recipe.config import RecipeConfig

    record = provenance(NAME)
    config = RecipeConfig(**{k: v for k, v in record["recipe"].items()})  # a valid recipe
    assert config.model == TRAINED[NAME].base and config.export.rank == json.loads(
        (adapter_dir(NAME) / "adapter_config.json").read_text())["r"]
    assert len(record["eval_seeds"]) >= 2 and set(record["training_seeds"]) == {"sft", "rl"}
    assert record["commits"] and all(re.fullmatch(r"[0-9a-f]{40}", c) for c in record["commits"])
    assert record["extraction"]["energy_kept"] > 0.99 and record["extraction"]["dropped_delta_norm"] == {}
    report = json.loads(REPORT.read_text())  # the committed report of the same run
    for env in ("primary", "miniweb"):
        assert record["heldout"][env] == report["evals"][env]
        for stage in ("baseline", "SFT", "RL"):
            figure = record["heldout"][env][stage]
            assert 0.0 <= figure["ci95"][0] <= figure["accuracy"] <= figure["ci95"][1] <= 1.0
    assert record["heldout"]["primary"]["RL"]["accuracy"] > record["heldout"]["primary"]["baseline"]["accuracy"]


@pytest.mark.slow
def test_the_shipped_agent_beats_the_base_on_held_out_tasks(smollm2_dir, tmp_path):
    from typer.testing import CliRunner

    from coa_cli.main import app

    out = tmp_path / "compare"
    result = CliRunner().invoke(app, ["compare", "--recipe", str(ROOT / "examples" / "recipe_smollm2_cpu.yaml"),
                                      "-m", "smollm2-135m", "-m", NAME, "--n", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    scores = json.loads((out / "compare.json").read_text())["sets"]["primary"]
    assert scores[NAME]["accuracy"] >= scores["smollm2-135m"]["accuracy"] + 0.2, scores

"""``coa compare``: every model plays the same held-out tasks; one table puts them side by side."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from coa_cli.main import app

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recipe_smollm2_cpu.yaml"


def _second_model(tmp_path, tiny_tokenizer):
    from agents.tiny import build_tiny_model, save_tiny

    return save_tiny(tmp_path / "other", tiny_tokenizer, build_tiny_model(tiny_tokenizer, seed=7))


def test_models_play_the_same_tasks_and_are_printed_side_by_side(tmp_path, tiny_dir, tiny_tokenizer):
    other = _second_model(tmp_path, tiny_tokenizer)
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", "coa/SynthHop-v0", "-m", str(tiny_dir), "-m", str(other), "--n", "3",
                                 "--max-turns", "1", "--max-new-tokens", "6", "-e", "task_options.difficulty=easy",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    runs = [out / "SynthHop-v0" / Path(m).name for m in (tiny_dir, other)]
    ids = [[json.loads(line)["task_id"] for line in (r / "trajectories.jsonl").open()] for r in runs]
    assert ids[0] == ids[1] and len(ids[0]) == 3  # the same held-out tasks for both
    assert all(json.loads((r / "summary.json").read_text())["split"] == "test" for r in runs)
    assert "tasks solved" in result.output and Path(tiny_dir).name in result.output and "other" in result.output
    assert "coa view" in result.output
    summary = json.loads((out / "compare.json").read_text())
    assert set(summary["sets"]["SynthHop-v0"]) == {Path(tiny_dir).name, "other"}


def test_a_recipe_gives_the_env_prompt_and_budgets(tmp_path, tiny_dir, tiny_tokenizer):
    other = _second_model(tmp_path, tiny_tokenizer)
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", "--recipe", str(EXAMPLE), "-m", str(tiny_dir), "-m", str(other),
                                 "--n", "2", "--max-new-tokens", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    first = json.loads((out / "primary" / Path(tiny_dir).name / "trajectories.jsonl").open().readline())
    assert "Plan the facts to find in <plan>" in first["prompt_messages"][0]["content"]  # the recipe's prompt
    assert first["task_id"].startswith("synthhop-w0-h1-2-")  # its 1- and 2-hop questions
    bad = runner.invoke(app, ["compare", "--recipe", str(EXAMPLE), "-m", "a", "-m", "b", "--set", "nope"])
    assert bad.exit_code != 0 and "not eval sets" in bad.output
    one = runner.invoke(app, ["compare", "coa/SynthHop-v0", "-m", "a"])
    assert one.exit_code != 0 and "two or more" in one.output


def _episodes(run: Path) -> list[tuple]:
    rows = map(json.loads, (run / "trajectories.jsonl").open())
    return [(row["task_id"], [segment["text"] for segment in row["segments"]], row["reward"]) for row in rows]


def test_models_played_side_by_side_give_what_they_give_in_turn(tmp_path, tiny_dir, tiny_tokenizer,
                                                                 monkeypatch):
    """``--jobs 2`` plays each model in a process of its own; every run keeps its seed, so the
    episodes are those of ``--jobs 1`` (threads fixed at 1 on both sides: same float sums)."""
    import torch

    other = _second_model(tmp_path, tiny_tokenizer)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        episodes = {}
        for jobs in ("1", "2"):
            out = tmp_path / f"jobs{jobs}"
            result = runner.invoke(app, ["compare", "coa/SynthHop-v0", "-m", str(tiny_dir), "-m", str(other),
                                         "--n", "3", "--max-turns", "2", "--max-new-tokens", "8",
                                         "-e", "task_options.difficulty=easy", "--jobs", jobs, "--out", str(out)])
            assert result.exit_code == 0, result.output
            episodes[jobs] = {name: _episodes(out / "SynthHop-v0" / name) for name in (Path(tiny_dir).name, "other")}
    finally:
        torch.set_num_threads(threads)
    assert episodes["1"] == episodes["2"]
    assert all(len(rows) == 3 for rows in episodes["2"].values())

"""``coa recipe ship``: a finished run's adapter, provenance and report are copied as one; bad runs are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coa_cli.recipe.ship import MAX_ADAPTER_BYTES, ship_run

HELDOUT = {"primary": {"baseline": {"accuracy": 0.0}, "SFT": {"accuracy": 0.5}, "RL": {"accuracy": 0.6}}}


def _run(tmp_path: Path, *, dirty: bool = False, weights: bytes = b"w" * 100, report_evals=HELDOUT) -> Path:
    run = tmp_path / "run"
    adapter = run / "export" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA"}))
    (adapter / "adapter_model.safetensors").write_bytes(weights)
    (adapter / "extraction.json").write_text(json.dumps({"rank": 8}))
    (adapter / "provenance.json").write_text(json.dumps({"heldout": HELDOUT, "dirty_tree": dirty,
                                                         "commits": ["a" * 40], "model": "smollm2-135m"}))
    (run / "report.json").write_text(json.dumps({"evals": report_evals}))
    (run / "report.md").write_text("# report\n![plot](report.png)\n")
    (run / "report.png").write_bytes(b"\x89PNG")
    return run


def test_a_complete_run_ships_its_adapter_provenance_and_report_together(tmp_path):
    run = _run(tmp_path)
    destination, figures = tmp_path / "agents" / "trained" / "x-coa", tmp_path / "docs" / "figures" / "x"
    destination.mkdir(parents=True)
    (destination / "stale.bin").write_bytes(b"old")  # a previous agent's files do not survive
    record = ship_run(run, destination, figures)
    assert record["commits"] == ["a" * 40]
    assert sorted(p.name for p in destination.iterdir()) == ["adapter_config.json", "adapter_model.safetensors",
                                                             "extraction.json", "provenance.json"]
    assert (destination / "adapter_model.safetensors").read_bytes() == b"w" * 100
    assert sorted(p.name for p in figures.iterdir()) == ["report.json", "report.md", "report.png"]


@pytest.mark.parametrize(("kwargs", "remove", "message"), [
    ({}, "provenance.json", "lacks"),
    ({"dirty": True}, None, "uncommitted changes"),
    ({"weights": b"w" * (MAX_ADAPTER_BYTES + 1)}, None, "over the"),
    ({"report_evals": {"primary": {}}}, None, "disagree"),
])
def test_a_run_a_shipped_agent_must_not_come_from_is_refused(tmp_path, kwargs, remove, message):
    run = _run(tmp_path, **kwargs)
    if remove:
        (run / "export" / "adapter" / remove).unlink()
    destination = tmp_path / "dest"
    with pytest.raises(ValueError, match=message):
        ship_run(run, destination)
    assert not destination.exists()  # nothing half-copied


def test_the_command_names_what_it_shipped(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import agents
    from coa_cli.main import app

    fake_package = tmp_path / "pkg" / "agents"
    fake_package.mkdir(parents=True)
    monkeypatch.setattr(agents, "__file__", str(fake_package / "__init__.py"))
    result = CliRunner().invoke(app, ["recipe", "ship", str(_run(tmp_path)), "--name", "x-coa"])
    assert result.exit_code == 0, result.output
    assert "shipped x-coa" in result.output and "RL 0.600" in result.output and "aaaaaaa" in result.output
    assert (fake_package / "trained" / "x-coa" / "provenance.json").is_file()
    refused = CliRunner().invoke(app, ["recipe", "ship", str(_run(tmp_path / "d", dirty=True)), "--name", "x"])
    assert refused.exit_code != 0 and "uncommitted" in refused.output

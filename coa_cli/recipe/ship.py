"""``coa recipe ship``: a finished recipe run's adapter becomes a trained agent of the package.

The export stage writes the final model as an adapter (``<run>/export/adapter``) and, once
the run is complete, its ``provenance.json``. Shipping copies exactly those files into
``agents/trained/<name>/`` (what :mod:`agents.trained` serves by name) and, with
``--figures``, the run's ``report.md/json/png`` beside them in the docs, so the shipped agent
and the committed report come from one run. It refuses what a shipped agent must not be: an
incomplete run, a run from a tree with uncommitted changes, an adapter over the size limit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["MAX_ADAPTER_BYTES", "ship_run"]

MAX_ADAPTER_BYTES = 5_000_000
"""A shipped adapter lives in the repository: it stays under 5 MB."""

_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "provenance.json", "extraction.json")
_REPORT_FILES = ("report.md", "report.json", "report.png")


def _check(run: Path, adapter: Path, allow_dirty: bool) -> dict[str, Any]:
    missing = [f for f in _ADAPTER_FILES if not (adapter / f).is_file()]
    if missing:
        raise ValueError(f"{adapter} lacks {missing}: ship a complete run (provenance.json is written "
                         "when every stage has finished)")
    size = (adapter / "adapter_model.safetensors").stat().st_size
    if size > MAX_ADAPTER_BYTES:
        raise ValueError(f"the adapter has {size} bytes, over the {MAX_ADAPTER_BYTES} a shipped agent may have "
                         "(export.rank / export.dtype make it smaller)")
    record = json.loads((adapter / "provenance.json").read_text(encoding="utf-8"))
    if record.get("dirty_tree") and not allow_dirty:
        raise ValueError(f"{run} ran from a tree with uncommitted changes; its commit does not say what "
                         "produced it (--allow-dirty ships it anyway)")
    report = run / "report.json"
    if report.is_file() and json.loads(report.read_text(encoding="utf-8")).get("evals") != record.get("heldout"):
        raise ValueError(f"{report} and the provenance disagree on the held-out figures: rewrite the report "
                         "(coa recipe report) or rerun the recipe")
    return record


def ship_run(run: Path, destination: Path, figures: Path | None = None, *,
             allow_dirty: bool = False) -> dict[str, Any]:
    """Copy ``run``'s exported adapter and provenance to ``destination`` (and its report to
    ``figures``); returns the provenance record. The destination is replaced as a whole."""
    adapter = run / "export" / "adapter"
    record = _check(run, adapter, allow_dirty)
    if figures is not None:
        absent = [f for f in _REPORT_FILES if not (run / f).is_file()]
        if absent:
            raise ValueError(f"{run} lacks {absent}")
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    for name in _ADAPTER_FILES:
        shutil.copy2(adapter / name, destination / name)
    if figures is not None:
        figures.mkdir(parents=True, exist_ok=True)
        for name in _REPORT_FILES:
            shutil.copy2(run / name, figures / name)
    return record

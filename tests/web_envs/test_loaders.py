"""Web loaders read each benchmark's official format and fail with a recipe when data is absent."""

from __future__ import annotations

import base64
import csv
import hashlib
import itertools
import json
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401  (registers the ids)
from coa_envs.tasks import DataNotFoundError, TaskDataError
from coa_envs.tasks.web import load_tasks
from coa_envs.tasks.web_browsecomp import decrypt_cell, encrypt_cell

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _no_hub_and_no_data_dir(monkeypatch, tmp_path):
    """Hermetic: never try the Hub, never see a developer's COA_DATA_DIR, cache in tmp."""
    monkeypatch.setenv("COA_NO_HF_DOWNLOAD", "1")
    monkeypatch.delenv("COA_DATA_DIR", raising=False)
    monkeypatch.setenv("COA_CACHE_DIR", str(tmp_path / "cache"))


# -- GAIA ---------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["root", "split_dir", "metadata_file"])
def test_gaia_hf_layout_from_root_split_or_metadata_file(where):
    base = FIXTURES / "gaia"
    path = {"root": base, "split_dir": base / "2023" / "validation",
            "metadata_file": base / "2023" / "validation" / "metadata.jsonl"}[where]
    tasks = load_tasks(str(path), dataset="gaia")
    assert [t.gold for t in tasks] == [("Silverrun",), ("1250",), ("red, green, blue",)]
    assert [t.metadata["level"] for t in tasks] == [1, 2, 3]
    spreadsheet = tasks[1].files[0]
    assert Path(spreadsheet).is_absolute() and Path(spreadsheet).read_text().startswith("item,")
    assert tasks[0].files == ()


def test_gaia_level_option_filters_and_validates():
    path = str(FIXTURES / "gaia")
    assert [t.metadata["level"] for t in load_tasks(path, dataset="gaia", level=2)] == [2]
    assert len(load_tasks(path, dataset="gaia", level=[1, 3])) == 2
    with pytest.raises(ValueError, match="level"):
        load_tasks(path, dataset="gaia", level=4)


def test_gaia_simple_json_list_resolves_attachments_relative_to_the_file():
    tasks = load_tasks(str(FIXTURES / "gaia_simple.json"), dataset="gaia")
    assert [t.gold for t in tasks] == [("4",), ("green",)]
    assert Path(tasks[1].files[0]).is_file() and Path(tasks[1].files[0]).is_absolute()
    assert [t.metadata["level"] for t in tasks] == [1, 2]


def test_gaia_metadata_naming_a_missing_attachment_names_file_row_and_field(tmp_path):
    split = tmp_path / "2023" / "validation"
    split.mkdir(parents=True)
    row = {"task_id": "x", "Question": "q", "Level": 1, "Final answer": "a", "file_name": "gone.xlsx"}
    (split / "metadata.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(TaskDataError, match=r"row 1: field 'file_name'"):
        load_tasks(str(tmp_path), dataset="gaia")


def test_gaia_missing_question_field_is_reported(tmp_path):
    (tmp_path / "metadata.jsonl").write_text(json.dumps({"task_id": "x", "Final answer": "a"}) + "\n")
    with pytest.raises(TaskDataError, match="'Question'"):
        load_tasks(str(tmp_path), dataset="gaia")


def test_gaia_is_found_under_coa_data_dir(monkeypatch, tmp_path):
    shutil.copytree(FIXTURES / "gaia", tmp_path / "GAIA")
    monkeypatch.setenv("COA_DATA_DIR", str(tmp_path))
    assert len(load_tasks(dataset="gaia")) == 3


# -- BrowseComp ---------------------------------------------------------------------------
def test_browsecomp_decryption_matches_the_published_procedure():
    canary = "BENCHMARK DATA SHOULD NEVER APPEAR AS PLAIN TEXT ONLINE. canary GUID test:1234"
    plain = "Which invented harbour town hosts the kite festival? Ünïcode and a long text " * 3
    # Independent derivation: the SHA-256 digest of the canary, cycled over the message.
    key = itertools.cycle(hashlib.sha256(canary.encode()).digest())
    mixed = bytes(b ^ k for b, k in zip(plain.encode(), key, strict=False))
    expected_cipher = base64.b64encode(mixed).decode()
    assert encrypt_cell(plain, canary) == expected_cipher
    assert decrypt_cell(expected_cipher, canary) == plain


def test_browsecomp_csv_rows_are_decrypted_with_their_canary():
    tasks = load_tasks(str(FIXTURES / "browse_comp_test_set.csv"), dataset="browsecomp")
    assert [t.task_id for t in tasks] == ["browsecomp-0", "browsecomp-1", "browsecomp-2"]
    assert tasks[0].gold == ("Lyra",) and "lighthouse keeper" in tasks[0].question
    assert tasks[0].metadata["topic"] == "Art"
    raw = (FIXTURES / "browse_comp_test_set.csv").read_text()
    assert "Lyra" not in raw and "lighthouse" not in raw  # the fixture really is encrypted


def test_browsecomp_row_with_the_wrong_canary_is_a_data_error(tmp_path):
    bad = tmp_path / "browse_comp_test_set.csv"
    with open(bad, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["problem", "answer", "canary"])
        writer.writerow([encrypt_cell("héllo wörld", "right"), encrypt_cell("x", "right"), "wrong"])
    with pytest.raises(TaskDataError, match=r"row 0: field 'problem'"):
        load_tasks(str(bad), dataset="browsecomp")


def test_browsecomp_accepts_a_simple_json_list(tmp_path):
    simple = tmp_path / "bc.json"
    simple.write_text(json.dumps([{"question": "q?", "answer": "a"}]))
    (task,) = load_tasks(str(simple), dataset="browsecomp")
    assert task.gold == ("a",) and task.metadata["dataset"] == "browsecomp"


# -- HLE ----------------------------------------------------------------------------------
def test_hle_parquet_with_image_attachment(tmp_path):
    tasks = load_tasks(str(FIXTURES / "hle"), dataset="hle")
    assert [t.task_id for t in tasks] == [f"coa-hle-fixture-000{i}" for i in (1, 2, 3)]
    assert tasks[1].metadata["answer_type"] == "multipleChoice" and tasks[1].gold == ("C",)
    image = Path(tasks[2].files[0])
    assert image.suffix == ".png" and image.read_bytes().startswith(b"\x89PNG")
    assert str(image).startswith(str(tmp_path / "cache"))
    assert len(load_tasks(str(FIXTURES / "hle"), dataset="hle", text_only=True)) == 2
    assert len(load_tasks(str(FIXTURES / "hle"), dataset="hle", category="Other")) == 1


def test_hle_official_jsonl_export(tmp_path):
    import pyarrow.parquet as pq

    rows = pq.read_table(next((FIXTURES / "hle" / "data").glob("*.parquet"))).to_pylist()
    export = tmp_path / "hle.jsonl"
    export.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "image_preview"}) + "\n"
                              for r in rows))
    tasks = load_tasks(str(export), dataset="hle")
    assert len(tasks) == 3 and tasks[2].files


# -- WebWalkerQA and generic lists --------------------------------------------------------
def test_webwalker_ships_with_the_package():
    tasks = load_tasks(dataset="webwalker")
    assert len(tasks) == 680
    first = tasks[0]
    assert first.metadata["root_url"] == "https://ehaweb.org/"
    assert first.question.endswith("Start from this website: https://ehaweb.org/")
    assert first.metadata["source_website"] and first.metadata["Level"] == "medium"
    bare = load_tasks(dataset="webwalker", include_root_url=False, limit=2)
    assert len(bare) == 2 and "Start from" not in bare[0].question


def test_simple_list_without_dataset_and_bad_options(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "q?", "answer": ["a", "b"]}) + "\n")
    (task,) = load_tasks(str(path))
    assert task.task_id == "q1" and task.gold == ("a", "b")
    with pytest.raises(ValueError, match="dataset"):
        load_tasks(str(path), dataset="nope")
    with pytest.raises(ValueError, match="format"):
        load_tasks(str(path), format="xml")
    with pytest.raises(FileNotFoundError):
        load_tasks(str(tmp_path / "missing.json"), dataset="gaia")
    path.write_text(json.dumps({"question": "q?"}) + "\n")
    with pytest.raises(TaskDataError, match="'answer'"):
        load_tasks(str(path))


# -- gym.make without data -------------------------------------------------------------
@pytest.mark.parametrize(
    ("env_id", "must_mention"),
    [
        ("coa/GAIA-v1", ["huggingface.co/datasets/gaia-benchmark/GAIA", "COA_DATA_DIR", "data_path"]),
        ("coa/BrowseComp-v1", ["browse_comp_test_set.csv", "COA_DATA_DIR", "data_path"]),
        ("coa/HLE-v1", ["huggingface.co/datasets/cais/hle", "COA_DATA_DIR", "data_path"]),
    ],
)
def test_make_without_data_says_how_to_get_it(env_id, must_mention):
    with pytest.raises(DataNotFoundError) as caught:
        gym.make(env_id)
    for text in must_mention:
        assert text in str(caught.value)


# -- Hugging Face Hub path (the network call is replaced; the loader's wiring is real) --------
def test_hub_is_only_tried_with_a_token(monkeypatch):
    from coa_envs.tasks import web_common

    # CI machines may export HF_HUB_OFFLINE; this test sets the environment it checks.
    monkeypatch.delenv("COA_NO_HF_DOWNLOAD", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    assert web_common.hf_authorised() is False
    monkeypatch.setattr("huggingface_hub.get_token", lambda: "hf_x")
    assert web_common.hf_authorised() is True
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert web_common.hf_authorised() is False


def test_gaia_downloads_the_split_from_the_hub_when_authorised(monkeypatch):
    calls = []

    def fake_snapshot_download(**kwargs):
        calls.append(kwargs)
        return str(FIXTURES / "gaia")

    monkeypatch.setattr("coa_envs.tasks.web_gaia.hf_authorised", lambda: True)
    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_snapshot_download)
    assert len(load_tasks(dataset="gaia")) == 3
    assert calls == [{"repo_id": "gaia-benchmark/GAIA", "repo_type": "dataset",
                      "allow_patterns": ["2023/validation/*"]}]


def test_hle_reads_the_hub_dataset_when_authorised(monkeypatch):
    datasets = pytest.importorskip("datasets", reason="pip install datasets")
    import pyarrow.parquet as pq

    rows = pq.read_table(next((FIXTURES / "hle" / "data").glob("*.parquet"))).to_pylist()
    monkeypatch.setattr("coa_envs.tasks.web_hle.hf_authorised", lambda: True)
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda repo, split: datasets.Dataset.from_list(rows))
    tasks = load_tasks(dataset="hle")
    assert [t.gold[0] for t in tasks] == ["391", "C", "red"] and tasks[2].files

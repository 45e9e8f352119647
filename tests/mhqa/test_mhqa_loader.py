"""MHQA loaders read every supported format, find data where users put it, and say where to
get data when there is none; every MHQA id runs on a fixture in each format."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import coa_envs
from agents.episode import run_episode
from agents.oracle import OracleAgent
from coa_envs.tasks import DataNotFoundError, TaskDataError
from coa_envs.tasks.mhqa import DATASETS, load_tasks

FIXTURES = Path(__file__).parent / "fixtures"
FORMAT_FILES = sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".jsonl", ".json"))
MHQA_IDS = [i for i in coa_envs.ids() if coa_envs.registry.entry(i)["family"] == "mhqa"]


@pytest.mark.parametrize("name", FORMAT_FILES)
def test_every_fixture_format_loads_the_same_questions_and_answers(name):
    tasks = load_tasks(str(FIXTURES / name), dataset="hotpotqa")
    assert tasks[0].question == "Which planet is known as the Red Planet?"
    single_answer = name == "hotpotqa.json"  # HotpotQA/2Wiki rows carry one answer string
    assert tasks[1].gold == (("100",) if single_answer else ("100", "one hundred"))
    assert tasks[2].gold == (("Herman Melville",) if single_answer else ("Herman Melville", "Melville"))
    assert len({t.task_id for t in tasks}) == 3


def test_source_ids_are_kept_and_metadata_records_the_format():
    tasks = load_tasks(str(FIXTURES / "popqa.jsonl"), dataset="popqa")
    assert tasks[0].task_id == "popqa-4000" and tasks[0].metadata["format"] == "popqa"
    assert load_tasks(str(FIXTURES / "hotpotqa.json"), dataset="hotpotqa")[0].task_id == "hotpotqa-5a8b0000"


def test_parquet_files_load(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.Table.from_pylist([{"id": "a", "question": "Q?", "golden_answers": ["x", "y"]}]), tmp_path / "test.parquet"
    )
    [task] = load_tasks(str(tmp_path / "test.parquet"))
    assert task.gold == ("x", "y")


def test_missing_field_names_file_row_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"question": "ok?", "golden_answers": ["a"]}) + "\n" + json.dumps({"question": "no answer"})
    )
    with pytest.raises(TaskDataError) as err:
        load_tasks(str(bad))
    assert err.value.row == 2 and err.value.field == "answer" and "bad.jsonl" in str(err.value)
    empty = tmp_path / "empty_gold.jsonl"
    empty.write_text(json.dumps({"question": "q", "golden_answers": ["  "]}))
    with pytest.raises(TaskDataError, match="no non-empty answer"):
        load_tasks(str(empty))


def test_explicit_format_overrides_detection():
    with pytest.raises(TaskDataError, match="golden_answers"):
        load_tasks(str(FIXTURES / "seed.jsonl"), format="flashrag")
    with pytest.raises(ValueError, match="format must be one of"):
        load_tasks(str(FIXTURES / "seed.jsonl"), format="squad2")


def test_nq_ships_the_full_open_nq_test_set():
    tasks = load_tasks(dataset="nq")
    # 3,610 rows; 2 have no gold that survives normalisation (")", "---") and are refused
    assert len(tasks) == 3608
    assert tasks[0].gold == ("Wilhelm Conrad Röntgen",)


def test_golds_that_normalise_to_nothing_are_refused_and_counted(caplog):
    from coa_envs.rewards.em_f1 import normalize_answer
    from coa_envs.tasks.hygiene import REPORTS

    with caplog.at_level("WARNING"):
        tasks = {t.task_id: t for t in load_tasks(dataset="nq")}
    assert all(normalize_answer(g) for t in tasks.values() for g in t.gold)
    assert "nq-test-00665" not in tasks and "nq-test-01421" not in tasks  # their only gold: ")" and "---"
    assert tasks["nq-test-00150"].gold == ("AB+",)  # "A+" is "a" + punctuation: nothing after normalisation
    (report,) = [r for source, r in REPORTS.items() if source.startswith("mhqa nq")]
    assert report.refused_aliases == 4 and report.dropped_tasks == ("nq-test-00665", "nq-test-01421")
    assert "refused 4 gold alias(es)" in caplog.text


def test_data_dir_in_flashrag_layout_is_found(tmp_path, monkeypatch):
    (tmp_path / "musique").mkdir()
    (tmp_path / "musique" / "dev.jsonl").write_text((FIXTURES / "flashrag.jsonl").read_text())
    monkeypatch.setenv("COA_DATA_DIR", str(tmp_path))
    tasks = load_tasks(dataset="musique")
    assert len(tasks) == 3 and tasks[0].metadata["source"].endswith("musique/dev.jsonl")


def test_without_data_the_error_says_where_to_get_it_and_samples_are_opt_in(monkeypatch, caplog):
    monkeypatch.delenv("COA_DATA_DIR", raising=False)
    with pytest.raises(DataNotFoundError, match=r"FlashRAG.*bamboogle/test\.jsonl.*data_path.*source"):
        load_tasks(dataset="bamboogle")
    with pytest.raises(DataNotFoundError, match=r"hotpotqa/dev\.jsonl"):
        gym.make("coa/HotpotQA-v1")
    with pytest.raises(DataNotFoundError, match="not found"):
        load_tasks("/nonexistent/hotpot.jsonl", dataset="hotpotqa")
    with caplog.at_level(logging.WARNING, logger="coa_envs.tasks.mhqa"):
        sample = load_tasks(dataset="bamboogle", allow_sample=True)
    assert 1 <= len(sample) <= 20 and "SAMPLE" in caplog.text and "not the benchmark" in caplog.text


def test_every_dataset_has_shipped_data_or_an_opt_in_sample(monkeypatch):
    monkeypatch.delenv("COA_DATA_DIR", raising=False)
    for dataset in DATASETS:
        tasks = load_tasks(dataset=dataset, allow_sample=True)
        assert tasks and all(t.gold for t in tasks)


def test_a_folder_in_flashrag_layout_can_be_the_path(tmp_path):
    (tmp_path / "2wikimultihopqa").mkdir()
    (tmp_path / "2wikimultihopqa" / "dev.jsonl").write_text((FIXTURES / "flashrag.jsonl").read_text())
    tasks = load_tasks(str(tmp_path), dataset="2wiki")
    assert len(tasks) == 3 and tasks[0].metadata["source"].endswith("2wikimultihopqa/dev.jsonl")
    with pytest.raises(DataNotFoundError, match="FlashRAG layout"):
        load_tasks(str(tmp_path), dataset="musique")


def test_a_datasets_save_to_disk_folder_can_be_the_path(tmp_path):
    datasets = pytest.importorskip("datasets", reason="needs `pip install datasets`")
    rows = [json.loads(line) for line in (FIXTURES / "flashrag.jsonl").read_text().splitlines()]
    datasets.DatasetDict({"dev": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "hotpot"))
    tasks = load_tasks(str(tmp_path / "hotpot"), dataset="hotpotqa")
    assert [t.gold for t in tasks] == [t.gold for t in load_tasks(str(FIXTURES / "flashrag.jsonl"))]
    with pytest.raises(DataNotFoundError, match="splits"):
        load_tasks(str(tmp_path / "hotpot"), dataset="hotpotqa", source_split="train")


_HF_SCRIPT = """
import json, sys
from coa_envs.tasks import DataNotFoundError
from coa_envs.tasks.mhqa import load_tasks
tasks = load_tasks(source="hf", hf_repo=sys.argv[1], dataset="nq")
try:
    load_tasks(source="hf", dataset="popqa")
    error = None
except DataNotFoundError as exc:
    error = str(exc)
print(json.dumps({"golds": [list(t.gold) for t in tasks], "error": error}))
"""


def test_source_hf_goes_through_datasets_load_dataset_and_fails_clearly_offline(tmp_path):
    """A local repo laid out like FlashRAG's on the Hub (README configs), loaded by the real
    ``datasets.load_dataset``; with the Hub unreachable the error says where to get data.
    Runs in a child so the offline switches are set before ``datasets`` is imported."""
    pytest.importorskip("datasets", reason="needs `pip install datasets`")
    repo = tmp_path / "FlashRAG_datasets"
    (repo / "nq").mkdir(parents=True)
    (repo / "nq" / "test.jsonl").write_text((FIXTURES / "flashrag.jsonl").read_text())
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: nq\n  data_files:\n  - split: test\n    path: nq/test.jsonl\n---\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run(
        [sys.executable, "-c", _HF_SCRIPT, str(repo)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["golds"] == [["Mars"], ["100", "one hundred"], ["Herman Melville", "Melville"]]
    assert "RUC-NLPIR/FlashRAG_datasets" in result["error"] and "popqa/test.jsonl" in result["error"]


def test_limit_option():
    assert len(load_tasks(dataset="nq", limit=5)) == 5


@pytest.mark.parametrize("name", FORMAT_FILES)
@pytest.mark.parametrize("env_id", MHQA_IDS)
def test_every_mhqa_id_passes_env_check_and_oracle_on_each_format(env_id, name):
    env = gym.make(env_id, data_path=str(FIXTURES / name))
    try:
        check_env(env.unwrapped, skip_render_check=True)
        assert len(env.unwrapped.tasks) == 3
        trajectory = run_episode(env, OracleAgent(env), seed=1)
        assert trajectory.reward == 1.0, trajectory.info
        assert trajectory.info["reward_details"]["f1"] == 1.0
    finally:
        env.close()


def test_mhqa_env_without_a_wiki_index_tells_the_model_search_is_not_configured(monkeypatch):
    monkeypatch.delenv("COA_WIKI_INDEX", raising=False)
    env = gym.make("coa/NQ-v1")
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("<wiki_search>first nobel prize physics</wiki_search>")
    assert not terminated and reward == 0.0 and info["error_kind"] == "not_configured"
    assert "not configured" in observation
    env.close()


def test_mhqa_env_with_a_wiki_index_searches_it(small_index):
    env = gym.make("coa/NQ-v1", tools={"wiki_search": {"index": str(small_index)}})
    env.reset(seed=0)
    observation, *_, info = env.step("<wiki_search>first Nobel Prize in Physics</wiki_search>")
    assert info["error_kind"] is None and "Doc 1 (Title: Wilhelm Röntgen)" in observation
    env.close()

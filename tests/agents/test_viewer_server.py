"""The trajectory viewer without a browser: reading runs, the index, queries, the API, export.

Runs come from the real writers where they can: ``coa eval`` with the oracle (text only) and
with the tiny model through the hf engine (sampled token ids and logprobs), ``trainers.distill``
for a distill output; :mod:`agents.viewer.testing` adds the shapes no writer produces on
purpose (torn lines, unknown fields, hostile text, structured statuses).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("fastapi", reason="needs the [serve] extra")
from fastapi.testclient import TestClient

from agents.viewer import NotARunError, ViewerData, create_app, export_html
from agents.viewer.query import EpisodeQuery
from agents.viewer.testing import XSS_MARK, write_showcase_run
from coa_cli.main import app as cli

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _eval(out: Path, *args: str) -> Path:
    result = runner.invoke(cli, ["eval", "coa/SynthHop-v0", "--n", "3", "-k", "2", "--no-progress", "--no-plots",
                                 "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory) -> Path:
    return _eval(tmp_path_factory.mktemp("runs") / "oracle", "--agent", "oracle")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_dir) -> Path:
    return _eval(tmp_path_factory.mktemp("runs") / "tiny", "--model", str(tiny_dir), "--engine", "hf",
                 "--max-new-tokens", "24", "--max-turns", "2")


@pytest.fixture(scope="module")
def showcase_run(tmp_path_factory, tiny_tokenizer, tiny_dir) -> Path:
    return write_showcase_run(tmp_path_factory.mktemp("runs") / "showcase", tiny_tokenizer, tiny_dir)


@pytest.fixture(scope="module")
def data(oracle_run, tiny_run, showcase_run) -> ViewerData:
    return ViewerData([oracle_run, tiny_run, showcase_run])


@pytest.fixture(scope="module")
def client(data) -> TestClient:
    return TestClient(create_app(data), base_url="http://127.0.0.1")


def _all_rows(data: ViewerData, **filters) -> list[dict]:
    return data.episodes(EpisodeQuery(limit=500, **filters))["rows"]


def test_paths_that_are_not_runs_are_refused_with_what_was_looked_for(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "metrics.jsonl").write_text('{"step": 1, "rollout/reward_mean": 0.5}\n')
    (tmp_path / "notes.jsonl").write_text('{"hello": "world"}\n')
    for path, words in ((tmp_path / "missing", "does not exist"), (tmp_path / "empty", "not a run directory"),
                        (tmp_path / "rl", "trajectories.jsonl"), (tmp_path / "notes.jsonl", "env_id and task_id")):
        with pytest.raises(NotARunError, match=words):
            ViewerData([path])
    result = runner.invoke(cli, ["view", str(tmp_path / "empty")])
    printed = " ".join(result.output.replace("│", " ").split())  # rich wraps the message in a box
    assert result.exit_code == 2 and "is not a run directory: no trajectory JSONL found" in printed


def test_rl_and_distill_outputs_are_runs(tmp_path, oracle_run, tiny_dir):
    from trainers.distill import distill

    distilled = tmp_path / "sft.jsonl"
    distill([oracle_run], distilled)
    rl = tmp_path / "rl_run"  # the layout trainers/rl/loop.py and warmstart.py write
    (rl / "warm_start").mkdir(parents=True)
    (rl / "config.json").write_text(json.dumps({"algorithm": "dapo", "env_id": "coa/SynthHop-v0", "model": "tiny"}))
    (rl / "metrics.jsonl").write_text('{"step": 1}\n')
    (rl / "warm_start" / "oracle.jsonl").write_bytes((oracle_run / "trajectories.jsonl").read_bytes())
    (rl / "final").symlink_to(tiny_dir, target_is_directory=True)
    data = ViewerData([rl, distilled])
    rl_info, distill_info = data.runs_info()
    assert rl_info["kind"] == "rl" and rl_info["tokenizer"] == str(rl / "final")
    assert [f["path"] for f in rl_info["files"]] == ["warm_start/oracle.jsonl"]  # metrics.jsonl is not one
    assert distill_info["kind"] == "distill" and distill_info["episodes"] == 3
    assert distill_info["meta"]["kept"] == 3
    assert rl_info["health"] == {"alarms": [], "step": 1, "latest": {}}


def test_an_rl_runs_alarms_and_health_are_shown(tmp_path, oracle_run, tiny_dir):
    """What ``coa train rl`` leaves after an alarm: rollouts/step-N.jsonl (so the run opens),
    alarms.jsonl and health metrics; the run's entry carries them for the page."""
    rl = tmp_path / "rl_run"
    (rl / "rollouts").mkdir(parents=True)
    (rl / "config.json").write_text(json.dumps({"algorithm": {"name": "dapo"}}))
    rows = [{"step": 1, "policy/entropy": 2.0, "health/format_violation_rate": 0.1},
            {"step": 2, "policy/entropy": 0.2, "health/format_violation_rate": 0.4,
             "alarm/entropy_collapse": 1.0, "rollout/reward_mean": 0.5}]
    (rl / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    alarm = {"step": 2, "alarm": "entropy_collapse", "metric": "policy/entropy", "kind": "drop",
             "message": "policy/entropy fell from 2 to 0.2", "stop": False}
    (rl / "alarms.jsonl").write_text(json.dumps(alarm) + "\n")
    (rl / "rollouts" / "step-2.jsonl").write_bytes((oracle_run / "trajectories.jsonl").read_bytes())
    (info,) = ViewerData([rl]).runs_info()
    assert info["kind"] == "rl" and info["files"][0]["path"] == "rollouts/step-2.jsonl"
    health = info["health"]
    assert health["alarms"] == [alarm] and health["step"] == 2
    assert health["latest"] == {"policy/entropy": 0.2, "health/format_violation_rate": 0.4,
                                "alarm/entropy_collapse": 1.0}
    page = (Path(__file__).parents[2] / "agents" / "viewer" / "static" / "app.js").read_text()
    assert "ALARM ${a.alarm} at step ${a.step}" in page  # the page prints each alarm


# -- queries and the API ---------------------------------------------------------------------------
def test_filters_sorts_and_pages_agree_with_the_records(data):
    every = _all_rows(data)
    assert len(every) == 6 + 6 + 8
    readable = [r for r in every if r["status"] != "unreadable"]
    assert len(readable) == 19 and sum(r["status"] == "unreadable" for r in every) == 1
    ok = _all_rows(data, status="ok")
    assert ok and all(r["status"] == "ok" for r in ok)
    solved = _all_rows(data, min_reward=1.0)
    assert solved and all(r["reward"] >= 1.0 for r in solved)
    assert len(solved) + len(_all_rows(data, max_reward=0.999)) == len(readable)  # unreadable fails both
    assert {r["task_id"] for r in _all_rows(data, task="MATH-00")} == {f"math-000{i}" for i in range(1, 7)}
    errors = _all_rows(data, tool_errors="some")
    assert errors and all(r["tool_errors"] > 0 for r in errors)
    assert len(errors) + len(_all_rows(data, tool_errors="none")) == len(every)
    with_ids = _all_rows(data, has_ids="yes")
    assert {r["run"] for r in with_ids} == {1, 2} and all(r["tokens"] > 0 for r in with_ids)
    long = _all_rows(data, min_len=100, len_unit="tokens")
    assert long and all(r["tokens"] >= 100 for r in long)
    by_reward = _all_rows(data, sort="reward", order="desc")
    rewards = [r["reward"] for r in by_reward]
    assert rewards[-1] is None and rewards[:-1] == sorted(rewards[:-1], reverse=True)  # missing reward last
    by_task = _all_rows(data, run=0, sort="task")
    assert [(r["task_id"], r["sample_index"]) for r in by_task] == sorted((r["task_id"], r["sample_index"])
                                                                          for r in by_task)
    pages = [data.episodes(EpisodeQuery(sort="tokens", offset=o, limit=7))["rows"] for o in (0, 7, 14)]
    assert [r["key"] for page in pages for r in page] == [r["key"] for r in _all_rows(data, sort="tokens")]


def test_api_episode_shows_turns_spans_reward_and_protocol_errors(client):
    rows = client.get("/api/episodes", params={"run": 2, "task_id": "math-0001", "has_ids": "yes"}).json()["rows"]
    episode = client.get("/api/episode", params={"run": 2, "file": 0, "row": rows[0]["row"]}).json()
    tags = [s["tag"] for t in episode["turns"] for s in t["generated"]["spans"] if s["kind"] != "text"]
    assert tags == ["plan", "think", "code", "reflection", "suggested_answer", "double_check", "answer"]
    assert episode["turns"][0]["observations"][0]["spans"][1]["text"] == "\n391\n"
    assert episode["reward_details"]["gold"] == "391" and episode["reward"] == 1.0
    mask = episode["mask"]
    assert mask["has_ids"] and mask["generated_tokens"] + mask["observation_tokens"] == rows[0]["tokens"]

    malformed = client.get("/api/episodes", params={"run": 2, "task_id": "math-0002"}).json()["rows"][0]
    turns = client.get("/api/episode", params={"run": 2, "file": 0, "row": malformed["row"]}).json()["turns"]
    assert turns[0]["generated"]["protocol_error"]["kind"] == "unclosed_tag"
    assert turns[1]["generated"]["protocol_error"] is None


def test_token_view_decodes_sampled_ids_and_matches_the_training_mask(data, tiny_run):
    from agents.trajectory import read_trajectories

    trajectories = list(read_trajectories(tiny_run / "trajectories.jsonl"))
    for row, trajectory in enumerate(trajectories):
        view = data.tokens(1, 0, row)
        assert view["decoded"] and view["tokenizer_error"] is None
        flat = [token for block in view["blocks"] for token in block["tokens"]]
        assert [t[0] for t in flat] == trajectory.input_ids()
        assert [t[2] for t in flat] == trajectory.full_loss_mask()
        assert view["trained"] == sum(trajectory.loss_mask())
        for block in view["blocks"][1:]:  # pieces rebuild each segment's text exactly
            segment = trajectory.segments[block["segment"]]
            assert "".join(t[1] for t in block["tokens"]) == segment.text
            if block["kind"] == "generated":
                assert [t[3] for t in block["tokens"]] == pytest.approx(segment.logprobs)


def test_text_only_and_unreadable_episodes_display_instead_of_failing(client):
    rows = client.get("/api/episodes", params={"run": 0}).json()["rows"]
    episode = client.get("/api/episode", params={"run": 0, "file": 0, "row": rows[0]["row"]}).json()
    assert not episode["mask"]["has_ids"] and episode["mask"]["generated_chars"] > 0
    assert episode["turns"][0]["generated"]["spans"][0]["tag"] == "think"
    tokens = client.get("/api/tokens", params={"run": 0, "file": 0, "row": rows[0]["row"]}).json()
    assert tokens["total"] == 0 and not tokens["decoded"]

    broken = client.get("/api/episodes", params={"status": "unreadable"}).json()["rows"]
    assert len(broken) == 1 and broken[0]["line"] == 6
    shown = client.get("/api/episode", params={"run": 2, "file": 0, "row": broken[0]["row"]}).json()
    assert "not valid JSON" in shown["error"] and shown["raw"].startswith('{"env_id"')
    odd = client.get("/api/episodes", params={"run": 2, "task_id": "math-0006"}).json()["rows"][0]
    shown = client.get("/api/episode", params={"run": 2, "file": 0, "row": odd["row"]}).json()
    assert odd["status"] == "error:engine"
    assert shown["unknown_fields"] == {"judge_notes": {"rater": "r2"}, "segments[0].role": "assistant"}


def test_compare_pairs_tasks_of_two_runs(client):
    page = client.get("/api/compare", params={"a": 1, "b": 0, "sort": "task"}).json()
    assert page["total"] == 3 and page["only_a"] == page["only_b"] == 0
    first = page["rows"][0]
    assert first["b"]["reward"] == 1.0 and first["a"]["n"] == first["b"]["n"] == 2
    assert first["delta"] == first["b"]["reward"] - first["a"]["reward"]
    assert len(first["a"]["keys"]) == 2 and all(k.startswith("1.0.") for k in first["a"]["keys"])
    assert client.get("/api/compare", params={"a": 0, "b": 7}).status_code == 404


@pytest.mark.parametrize(("url", "status"), [
    ("/assets/../pyproject.toml", 404), ("/assets/..%2F..%2Fpyproject.toml", 404), ("/assets/index.html", 404),
    ("/api/episode?run=../../etc/passwd&file=0&row=0", 422), ("/api/episode?run=0&file=0&row=-1", 404),
    ("/api/episode?run=0&file=3&row=0", 404), ("/api/episode?run=9&file=0&row=0", 404),
    ("/api/episode?run=0&file=0&row=99999999999999999999999", 404), ("/api/episodes?sort=__class__", 422),
    ("/api/episodes?limit=100000", 422), ("/api/episodes?min_reward=abc", 422), ("/etc/passwd", 404),
])
def test_requests_cannot_reach_files_or_break_the_server(client, url, status):
    response = client.get(url)
    assert response.status_code == status
    if url.startswith("/api"):
        assert response.json()["error"]
    assert client.get("/api/runs").status_code == 200  # still serving


def test_only_loopback_hosts_are_answered_and_pages_carry_a_strict_csp(data):
    assert TestClient(create_app(data), base_url="http://attacker.example").get("/api/runs").status_code == 400
    page = TestClient(create_app(data), base_url="http://localhost:8765").get("/")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "unsafe-inline" not in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"


# -- export ----------------------------------------------------------------------------------------
def _embedded(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="coa-data">(.*?)</script>', html, re.S)
    assert block is not None
    return json.loads(block.group(1))


def test_export_is_one_self_contained_file_with_escaped_data(data, tmp_path):
    result = export_html(data, tmp_path / "share.html")
    html = Path(result.path).read_text()
    assert result.included == result.matched == 20 and result.capped_by is None
    assert "assets/" not in html and "http://" not in html.replace("http://www.w3.org", "")
    assert f"<script>window.{XSS_MARK}" not in html and "</script><script>alert" not in html
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 1 and "CoaApi" in scripts[0]  # the only executable block is ours
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    import base64
    import hashlib
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "connect-src" not in csp
    embedded = _embedded(html)
    assert len(embedded["rows"]) == 20 and set(embedded["episodes"]) == {r["key"] for r in embedded["rows"]}
    with_ids = next(r for r in embedded["rows"] if r["has_ids"])
    assert embedded["episodes"][with_ids["key"]]["tokens"]["decoded"]


def test_export_caps_by_episodes_or_bytes_keeping_whole_tasks(data, tmp_path):
    capped = export_html(data, tmp_path / "a.html", EpisodeQuery(task="synthhop"), max_episodes=7)
    rows = _embedded(Path(capped.path).read_text())["rows"]
    assert capped.capped_by == "max_episodes" and capped.included == 4 and capped.matched == 12
    assert {(r["run"], r["sample_index"]) for r in rows} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    first_task = data.episodes(EpisodeQuery(task="synthhop", limit=1))["rows"][0]["task_id"]
    assert {r["task_id"] for r in rows} == {first_task}  # one whole task, from both runs
    small = export_html(data, tmp_path / "b.html", max_bytes=12_000)
    assert small.capped_by == "max_bytes" and small.included == 1  # never empty: the first task is cut


def test_cli_exports_and_reports_caps(showcase_run, oracle_run, tmp_path):
    out = tmp_path / "view.html"
    result = runner.invoke(cli, ["view", str(oracle_run), str(showcase_run), "--export", str(out),
                                 "--max-episodes", "3", "--status", "ok"])
    assert result.exit_code == 0, result.output
    assert "1 unreadable lines" in result.output and "capped by --max-episodes" in result.output
    assert all(r["status"] == "ok" for r in _embedded(out.read_text())["rows"])


def test_wheel_ships_the_page_and_its_assets(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    site = tmp_path / "site"
    zipfile.ZipFile(next(tmp_path.glob("coa_envs-*.whl"))).extractall(site)
    code = ("from agents.viewer.app import ASSETS, read_asset; import agents.viewer as v;"
            "print(v.__file__); print(sum(len(read_asset(n)) > 100 for n in [*ASSETS, 'index.html']))")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, capture_output=True,
                         text=True).stdout.split()
    assert out[0].startswith(str(site)) and out[1] == "5"


def test_cli_serves_the_page_on_loopback(oracle_run):
    import httpx

    process = subprocess.Popen([sys.executable, "-m", "coa_cli.main", "view", str(oracle_run), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        lines = [process.stdout.readline() for _ in range(2)]
        url = re.search(r"http://127\.0\.0\.1:\d+/", lines[1]).group(0)
        for _ in range(200):
            try:
                runs = httpx.get(url + "api/runs", timeout=5).json()["runs"]
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail(f"coa view never answered at {url}")
        assert runs[0]["episodes"] == 6 and "6 episodes" in lines[0]
        assert "CoaApi" in httpx.get(url + "assets/api.js").text
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_run_made_with_a_catalogue_model_decodes_its_tokens(smollm2_dir):
    """`coa view` of a `--model smollm2-135m` run said "cannot load tokenizer 'smollm2-135m'
    offline": summary.json names the catalogue entry, which is its converted directory."""
    from agents.viewer.tokens import TokenizerCache

    tokenizer, error = TokenizerCache().get("smollm2-135m")
    assert error is None and tokenizer is not None
    assert tokenizer.decode(tokenizer.encode("Hello", add_special_tokens=False)) == "Hello"

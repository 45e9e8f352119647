"""``coa/MiniWeb-v0`` end to end: real search and crawl tools against the served mini-web.

The oracle scripts are replayed through ``env.step`` with the real ``web_search`` (local
BM25 over the exported pages) and ``crawl_page`` tools, and every observation must contain
the evidence the script relies on: the episode is solvable, not just answerable.
"""

from __future__ import annotations

import gymnasium as gym
import httpx
import pytest

import coa_envs  # noqa: F401
from coa_envs.miniweb import serve
from coa_envs.tasks.miniweb import make_kwargs


@pytest.fixture(scope="module")
def web():
    with serve(0, slow_delay_s=0.2) as server:
        yield server


def _play(env, task_id: str) -> tuple[float, list[dict]]:
    env.reset(options={"task_id": task_id})
    task = env.unwrapped.task
    infos = []
    reward = 0.0
    for action, evidence in zip(task.metadata["oracle_actions"], task.metadata["oracle_evidence"],
                                strict=True):
        observation, reward, terminated, truncated, info = env.step(action)
        infos.append(info)
        assert not truncated, (task_id, info)
        if not terminated:
            assert info["error_kind"] is None, (task_id, action, observation[:500])
            assert evidence in observation, (task_id, action, evidence, observation[:1500])
    return reward, infos


def test_every_task_is_solved_by_its_oracle_with_search_and_crawl(web):
    env = gym.make("coa/MiniWeb-v0", **make_kwargs(web))
    try:
        tasks = env.unwrapped.tasks
        assert {t.metadata["kind"] for t in tasks} >= {"profile", "project_budget", "report_pdf",
                                                       "symposium_city", "head_joined"}
        for task in tasks:
            reward, infos = _play(env, task.task_id)
            assert reward == 1.0, task.task_id
            tools = [name for i in infos for name in i["tool"]]
            assert tools[0] == "web_search" and "crawl_page" in tools
    finally:
        env.close()
    assert web.hits["/files/annual-report-2022.pdf"] + web.hits["/files/annual-report-2021.pdf"] \
        + web.hits["/files/annual-report-2023.pdf"] >= 2  # the PDFs were really fetched
    assert any(path.endswith(".php") for path in web.hits)  # redirect chains were walked


def test_wrong_answer_and_broken_links_are_observations_not_crashes(web):
    env = gym.make("coa/MiniWeb-v0", **make_kwargs(web))
    try:
        env.reset(seed=0)
        observation, _, terminated, _, info = env.step(
            f"<crawl_page>{web.url('/news/archive-2019.html')}</crawl_page>")
        assert not terminated and "404" in observation and info["error_kind"]
        observation, _, _, _, info = env.step("<crawl_page>http://10.1.2.3/admin</crawl_page>")
        assert info["error_kind"] == "blocked_url"
        with serve(5) as neighbour:  # another service on 127.0.0.1: not this env's server
            observation, _, _, _, info = env.step(f"<crawl_page>{neighbour.url('/')}</crawl_page>")
            assert info["error_kind"] == "blocked_url" and neighbour.hits.total() == 0
        _, reward, terminated, _, _ = env.step("<answer>certainly not this</answer>")
        assert terminated and reward == 0.0
    finally:
        env.close()


def test_default_make_serves_itself_and_close_stops_the_server():
    env = gym.make("coa/MiniWeb-v0")
    other = gym.make("coa/MiniWeb-v0")
    server = env.unwrapped._runtime.server
    try:
        assert other.unwrapped._runtime.server is server  # one shared server per process
        base = env.unwrapped.config.tasks["base_url"]
        assert base == server.base_url and base.startswith("http://127.0.0.1:")
        assert env.unwrapped.config.tools["crawl_page"]["allow_hosts"] == [base[len("http://"):]]
        assert env.unwrapped.config.tools["crawl_page"]["resolve_dns"] is False
        assert env.unwrapped.config.tools["web_search"]["path"] == str(server.pages_jsonl)
        env.reset(seed=1)
        reward, _ = _play(env, env.unwrapped.tasks[0].task_id)
        assert reward == 1.0
        env.close()
        assert httpx.get(base + "/", trust_env=False).status_code == 200  # other still uses it
    finally:
        env.close()
        other.close()
    assert server.closed
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/", trust_env=False, timeout=2)


def test_options_validate_at_make_time(web):
    with pytest.raises(ValueError, match="kinds"):
        gym.make("coa/MiniWeb-v0", task_options={"kinds": ["nope"]})
    with pytest.raises(ValueError, match="data_path"):
        gym.make("coa/MiniWeb-v0", data_path="/tmp/x.json")
    env = gym.make("coa/MiniWeb-v0", **make_kwargs(web, kinds=["report_pdf"]))
    try:
        assert {t.metadata["kind"] for t in env.unwrapped.tasks} == {"report_pdf"}
    finally:
        env.close()


@pytest.mark.browser
@pytest.mark.parametrize("backend", ["playwright", "selenium"])
def test_browser_backends_solve_the_javascript_task_and_a_walking_task(web, backend):
    from coa_envs.web.browsers import find_chromedriver, find_chromium

    if not find_chromium():
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    if backend == "selenium" and not find_chromedriver():
        pytest.skip("chromedriver is not installed (apt-get install -y chromium-driver)")
    pytest.importorskip({"playwright": "playwright.sync_api", "selenium": "selenium"}[backend],
                        reason=f"pip install {backend}")
    options = make_kwargs(web, include_js=True, kinds=["js_buoy", "symposium_city"])
    options["tools"]["crawl_page"]["backend"] = backend
    env = gym.make("coa/MiniWeb-v0", **options)
    try:
        for task in env.unwrapped.tasks[:2] + [t for t in env.unwrapped.tasks
                                               if t.metadata["needs_js"]]:
            reward, _ = _play(env, task.task_id)
            assert reward == 1.0, (backend, task.task_id)
    finally:
        env.close()


def test_port_scoped_allow_list_opens_one_service_only():
    from coa_envs.web.ssrf import UrlGuard

    guard = UrlGuard(["127.0.0.1:8080", "[::1]:9000"])
    assert guard.check("http://127.0.0.1:8080/page").allowed
    assert not guard.check("http://127.0.0.1:8081/page").allowed
    assert not guard.check("http://127.0.0.1/page").allowed
    assert guard.check("http://[::1]:9000/").allowed and not guard.check("http://[::1]:9001/").allowed
    assert not guard.check("http://10.0.0.1:8080/").allowed


def test_concurrent_episodes_share_one_server_without_errors(web):
    """Rollout workers run many episodes at once against one mini-web; none may fail."""
    from concurrent.futures import ThreadPoolExecutor

    envs = [gym.make("coa/MiniWeb-v0", **make_kwargs(web)) for _ in range(8)]
    try:
        task_ids = [t.task_id for t in envs[0].unwrapped.tasks]

        def run(index: int) -> list[float]:
            env = envs[index]
            return [_play(env, task_ids[index % len(task_ids)])[0]]

        with ThreadPoolExecutor(max_workers=8) as pool:
            rewards = [r for batch in pool.map(run, range(8)) for r in batch]
        assert rewards == [1.0] * 8
    finally:
        for env in envs:
            env.close()


def test_seed_option_serves_another_world():
    env = gym.make("coa/MiniWeb-v0", task_options={"seed": 2, "kinds": ["project_budget"]})
    try:
        assert env.unwrapped.task is None and env.unwrapped.config.tasks["seed"] == 2
        default_env = gym.make("coa/MiniWeb-v0")
        default_world = {t.question for t in default_env.unwrapped.tasks}
        default_env.close()
        assert not {t.question for t in env.unwrapped.tasks} & default_world
        reward, _ = _play(env, env.unwrapped.tasks[0].task_id)
        assert reward == 1.0
    finally:
        env.close()


def test_offline_env_sends_no_dns_query_for_names_the_agent_makes_up(web, monkeypatch):
    """The mini-web is at an IP literal; a crawl of any host name is refused without a lookup."""
    import socket

    lookups: list[str] = []
    real = socket.getaddrinfo

    def recording(host, *args, **kwargs):
        lookups.append(host)
        return real(host, *args, **kwargs)

    env = gym.make("coa/MiniWeb-v0", **make_kwargs(web))
    try:
        env.reset(seed=0)
        monkeypatch.setattr(socket, "getaddrinfo", recording)
        for url in ("https://en.wikipedia.org/wiki/Tide", "http://localhost:8080/", "intranet.corp/admin"):
            observation, _, terminated, _, info = env.step(f"<crawl_page>{url}</crawl_page>")
            assert not terminated and info["error_kind"] == "tool_error" and "DNS is disabled" in observation
        observation, _, _, _, info = env.step(f"<crawl_page>{web.url('/about.html')}</crawl_page>")
        assert info["error_kind"] is None and "About" in observation
    finally:
        env.close()
    assert [host for host in lookups if host not in ("127.0.0.1",)] == []

"""Rollout throughput: concurrent runner vs a sequential loop; server overhead per request.

Workload: coa/SynthHop-v0 episodes played by the tiny model through the real ``hf`` engine
and the real BM25 ``wiki_search`` tool with 50 ms of latency injected per call. A random
tiny model never calls a tool, so the model is *teacher-forced*: the tiny model's forward
runs (real compute, real KV cache, real batching) and its logits are then overridden to
emit the task's scripted oracle turns, which call the tool and solve the task.

Both arms run the same episodes with the same seeds on pre-warmed envs (index loading is
setup, not throughput). Reported, not asserted: episodes/min of each arm and their ratio
(target >= 3x on 2 cores), and the HTTP overhead of ``coa serve`` + the ``openai`` engine
per request against calling the same engine in process.
"""

from __future__ import annotations

import queue
import statistics
import time
from types import SimpleNamespace

import gymnasium as gym
import pytest

pytest.importorskip("transformers", reason="needs the [llm] extra")

import coa_envs  # noqa: F401
from agents.engines import GenerationRequest, SamplingParams
from agents.engines.hf import HFEngine
from agents.policy import LLMPolicy
from agents.rollout import episode_seed, play_episode, policy_factory, run_rollouts
from agents.tiny import build_tiny_model, train_tiny_tokenizer
from coa_envs.types import ToolContext, ToolResult

EPISODES = 8  # tasks 0-7: 2 to 5 turns each, 1 to 4 wiki_search calls
CONCURRENCY = 8
TOOL_LATENCY_S = 0.05


class _SlowTool:
    """The real tool plus a fixed latency, as a remote search service would add."""

    def __init__(self, tool, latency_s: float):
        self.tool, self.name, self.latency_s = tool, tool.name, latency_s

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        time.sleep(self.latency_s)
        return self.tool.run(query, ctx)


def _teacher_forced(model, tokenizer, scripts: dict[str, list[str]]):
    """Runs ``model`` for real, then forces each row's logits onto its task's oracle turn."""
    import torch

    class TeacherForcedLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model
            self.config, self.generation_config = model.config, model.generation_config
            self._cache, self._rows, self._step = None, [], 0  # strong ref: freed ids get reused

        @property
        def device(self):
            return self.inner.device

        def forward(self, input_ids, attention_mask=None, past_key_values=None, **kwargs):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=past_key_values, **kwargs)
            if past_key_values is not self._cache:  # a new generate call: plan each row
                self._cache, self._step, self._rows = past_key_values, 0, []
                for row in range(input_ids.shape[0]):
                    ids = input_ids[row][attention_mask[row].bool()].tolist()
                    text = tokenizer.decode(ids)
                    actions = next(a for q, a in scripts.items() if q in text)
                    turn = min(text.count("\n</observation>\n\n"), len(actions) - 1)
                    self._rows.append(tokenizer.encode(actions[turn]))
            forced = torch.full_like(out.logits[:, -1:, :], -1e4)
            for row, script in enumerate(self._rows):
                forced[row, 0, script[min(self._step, len(script) - 1)]] = 0.0
            self._step += 1
            return SimpleNamespace(logits=forced)

    return TeacherForcedLM()


@pytest.fixture(scope="module")
def workload():
    tokenizer = train_tiny_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size=128, layers=4, heads=4)
    probe = gym.make("coa/SynthHop-v0")
    tasks = probe.unwrapped.tasks[:EPISODES]
    probe.close()
    scripts = {t.question: list(t.metadata["oracle_actions"]) for t in tasks}
    engine = HFEngine(_teacher_forced(model, tokenizer, scripts), tokenizer)
    policy = LLMPolicy(engine, sampling=SamplingParams(max_new_tokens=160))

    def warm_env():
        env = gym.make("coa/SynthHop-v0")
        env.reset(options={"task_index": 0})
        tools = env.unwrapped.tools
        for name in list(tools):
            tools[name].run("warm up", ToolContext())  # load the index now, not in the timing
            tools[name] = _SlowTool(tools[name], TOOL_LATENCY_S)
        return env

    return SimpleNamespace(policy=policy, warm_env=warm_env, tokenizer=tokenizer, model=model)


@pytest.mark.timeout(1800)  # ~5 min on 2 loaded cores; the sequential arm dominates
def test_rollout_throughput_concurrent_vs_sequential(benchmark, workload):
    env = workload.warm_env()
    started = time.perf_counter()
    sequential = [play_episode(env, workload.policy.fork(episode_seed(0, i, 0)),
                               seed=episode_seed(0, i, 0), options={"task_index": i})
                  for i in range(EPISODES)]
    sequential_s = time.perf_counter() - started
    env.close()

    pool: queue.Queue = queue.Queue()
    for _ in range(CONCURRENCY):
        pool.put(workload.warm_env())
    factory, close = policy_factory(workload.policy)

    def concurrent():
        return run_rollouts(pool.get_nowait, factory, task_indices=range(EPISODES),
                            concurrency=CONCURRENCY, seed=0)

    result = benchmark.pedantic(concurrent, rounds=1, iterations=1)
    close()
    assert [t.reward for t in sequential] == [1.0] * EPISODES  # the workload is real
    assert sorted(t.reward for t in result.trajectories) == [1.0] * EPISODES
    seq_rate = 60 * EPISODES / sequential_s
    conc_rate = 60 * EPISODES / result.wall_s
    tool_calls = sum(sum(t.tool_calls.values()) for t in sequential)
    benchmark.extra_info.update({
        "episodes": EPISODES, "concurrency": CONCURRENCY, "tool_latency_s": TOOL_LATENCY_S,
        "tool_calls": tool_calls,
        "sequential_episodes_per_min": round(seq_rate, 1),
        "concurrent_episodes_per_min": round(conc_rate, 1),
        "speedup": round(conc_rate / seq_rate, 2),
    })
    print(f"\nrollout: sequential {seq_rate:.1f} ep/min, concurrent {conc_rate:.1f} ep/min, "
          f"speedup {conc_rate / seq_rate:.2f}x ({tool_calls} tool calls)")


def test_server_overhead_per_request(benchmark, workload):
    from agents.engines.openai_compat import OpenAIEngine
    from agents.server import create_app, serve_in_thread

    tokenizer, model = workload.tokenizer, workload.model
    local = HFEngine(model, tokenizer)
    prompt = tuple(tokenizer.encode("<|im_start|>user\nWho founded it?<|im_end|>\n"
                                    "<|im_start|>assistant\n"))
    params = SamplingParams(max_new_tokens=16, seed=0, stop=())
    request = GenerationRequest(token_ids=prompt)

    def once(engine) -> float:
        started = time.perf_counter()
        (completion,) = engine.generate([request], params)
        assert completion.ok
        return time.perf_counter() - started

    def interleaved(remote, repeats=20):
        """Alternate the two arms so a load change on the shared machine hits both alike."""
        once(local), once(remote)  # warm
        pairs = [(once(local), once(remote)) for _ in range(repeats)]
        return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))

    with serve_in_thread(create_app(local, tokenizer, "tiny")) as url:
        remote = OpenAIEngine(url, "tiny", tokenizer=tokenizer, max_retries=0)
        in_process, over_http = benchmark.pedantic(interleaved, args=(remote,), rounds=1,
                                                   iterations=1)
        remote.close()
    benchmark.extra_info.update({
        "in_process_ms": round(in_process * 1e3, 2),
        "over_http_ms": round(over_http * 1e3, 2),
        "overhead_ms": round((over_http - in_process) * 1e3, 2),
        "ratio": round(over_http / in_process, 2),
    })
    print(f"\nserver: in-process {in_process * 1e3:.1f} ms, over HTTP {over_http * 1e3:.1f} ms "
          f"per 16-token request (overhead {(over_http - in_process) * 1e3:.1f} ms)")

"""Reward latency: a 3-term composed reward against the single term, in the same run.

Arms, scored on the same realistic episode (three turns, two ~1.5 kB observations, one
answer), interleaved round by round in a shuffled order so machine load hits every arm alike:

* ``bare_em``: the EM/F1 term called directly (what ``build_reward`` returned before terms);
* ``single``: the registry's one-term form ``{name: em_f1}`` through the composition;
* ``three``: ``em_f1 + 0.1*format + 0.2*tool_use`` (the seed-style shaped reward);
* ``group8``: the group-relative length term over 8 samples, per sample (extra info).

Reported: per-call median microseconds per arm (median over rounds, with the min-max
spread), and the ratios three/single and single/bare computed per round (median and
spread). Run: ``pytest benchmarks/test_reward_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import random
import statistics
import time

from coa_envs.rewards import EpisodeView, ToolCallRecord, build_reward
from coa_envs.rewards.em_f1 import build as build_em
from coa_envs.types import Task

ROUNDS = 30
CALLS = 200

TASK = Task("t", "Which company employed the founder of Kaliav Shipyards?", gold=("Orlin Works", "Orlin"))
PASSAGES = "\n".join(f"Doc {i} (Title: Page {i}) " + "filler text about shipyards and founders. " * 8
                     for i in range(1, 4))
SEGMENTS = (
    ("generated", "<plan>find the founder, then the employer</plan><think>search the shipyard</think>"
                  "<wiki_search>Kaliav Shipyards founder</wiki_search>"),
    ("observation", f"\n<observation>\n{PASSAGES}\n</observation>\n\n"),
    ("generated", "<reflection>the founder is Ada Velm</reflection><think>now her employer</think>"
                  "<wiki_search>Ada Velm employer</wiki_search>"),
    ("observation", f"\n<observation>\n{PASSAGES}\n</observation>\n\n"),
    ("generated", "<think>the passage says Orlin Works</think><answer>Orlin Works</answer>"),
)
EPISODE = EpisodeView(task=TASK, answer="Orlin Works", segments=SEGMENTS,
                      tool_calls=(ToolCallRecord("wiki_search", "Kaliav Shipyards founder"),
                                  ToolCallRecord("wiki_search", "Ada Velm employer")))


def _arms():
    bare = build_em()
    single = build_reward({"name": "em_f1"})
    three = build_reward({"terms": [{"name": "em_f1"}, {"name": "format", "weight": 0.1},
                                    {"name": "tool_use", "weight": 0.2}]})
    grouped = build_reward({"terms": [{"name": "em_f1"}, {"name": "group_length", "weight": 0.5}]})
    views = [EpisodeView(task=TASK, answer="Orlin Works", segments=SEGMENTS, response_tokens=100 + 13 * i,
                         primary_score=float(i % 2)) for i in range(8)]
    details = [grouped.score_episode(v).details for v in views]
    assert three.score_episode(EPISODE).score == 1.0 + 0.1 + 0.2  # the arms score what they should
    return {
        "bare_em": (lambda: bare("Orlin Works", TASK), 1),
        "single": (lambda: single.score_episode(EPISODE), 1),
        "three": (lambda: three.score_episode(EPISODE), 1),
        "group8": (lambda: grouped.score_group(views, details), 8),
    }


def _measure(arms, rounds: int, calls: int) -> dict[str, list[float]]:
    """Per-call microseconds per arm and round; arms run in a fresh random order each round."""
    order = list(arms)
    shuffle = random.Random(0).shuffle
    per_round: dict[str, list[float]] = {name: [] for name in arms}
    for name in order:  # warm up every arm once (imports, caches)
        for _ in range(calls // 4):
            arms[name][0]()
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            call, samples = arms[name]
            started = time.perf_counter()
            for _ in range(calls):
                call()
            per_round[name].append((time.perf_counter() - started) / (calls * samples) * 1e6)
    return per_round


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def test_three_term_reward_vs_single_term(benchmark):
    arms = _arms()
    per_round = benchmark.pedantic(_measure, args=(arms, ROUNDS, CALLS), rounds=1, iterations=1)
    three_vs_single = [t / s for t, s in zip(per_round["three"], per_round["single"], strict=True)]
    single_vs_bare = [s / b for s, b in zip(per_round["single"], per_round["bare_em"], strict=True)]
    lines = [f"{name:8s} {_spread(values)} us per call (per sample for group8)"
             for name, values in per_round.items()]
    lines.append(f"three/single ratio  {_spread(three_vs_single)}")
    lines.append(f"single/bare ratio   {_spread(single_vs_bare)}")
    print("\nreward latency, median [min-max] over", ROUNDS, "interleaved rounds of", CALLS, "calls\n  "
          + "\n  ".join(lines))
    benchmark.extra_info.update({f"{name}_us": round(statistics.median(v), 3) for name, v in per_round.items()})
    benchmark.extra_info.update({
        "three_vs_single_median": round(statistics.median(three_vs_single), 3),
        "three_vs_single_min": round(min(three_vs_single), 3),
        "three_vs_single_max": round(max(three_vs_single), 3),
        "single_vs_bare_median": round(statistics.median(single_vs_bare), 3),
    })

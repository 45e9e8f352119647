"""Protocol parsing throughput on realistic 8 kB turns (target >= 50 MB/s).

Baseline in the same run: one regex scan for tags over the same text (the least any
tag parser must do), so the ratio says how much our validation costs on top.
"""

from __future__ import annotations

import re

from coa_envs.protocol import parse_turn

_THINK = (
    "We need the population of the capital. First recall what we know about the country, "
    "its history and geography; then decide what to verify. Numbers like 3 < 4 and x > y appear. "
)


def realistic_turn(size: int = 8192) -> str:
    body = (_THINK * (size // len(_THINK) + 1))[: size - 400]
    turn = (
        f"<plan>\n1. find the capital\n2. find its population\n</plan>\n<think>\n{body}\n</think>\n"
        "<reflection>the earlier search was too broad</reflection>\n"
        "<web_search>population of the capital city of Freedonia 2024 census</web_search>"
    )
    assert parse_turn(turn).ok
    return turn


TURN = realistic_turn()
MB = len(TURN.encode()) / 1e6


def test_parse_8kb_turn(benchmark):
    benchmark(parse_turn, TURN)
    mb_per_s = MB / benchmark.stats.stats.median
    benchmark.extra_info["MB_per_s"] = round(mb_per_s, 1)
    print(f"\nprotocol parse: {mb_per_s:.1f} MB/s on {len(TURN)}-char turns (target >= 50)")


_TAGS = re.compile(r"</?[a-z_]+>")


def test_baseline_regex_tag_scan(benchmark):
    benchmark(_TAGS.findall, TURN)
    mb_per_s = MB / benchmark.stats.stats.median
    benchmark.extra_info["MB_per_s"] = round(mb_per_s, 1)
    print(f"\nbaseline regex tag scan: {mb_per_s:.1f} MB/s")

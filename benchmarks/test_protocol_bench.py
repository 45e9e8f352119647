"""Protocol parsing throughput on realistic 8 kB turns (target >= 50 MB/s).

Baseline in the same run: one regex scan for tags over the same text (the least any
tag parser must do), so the ratio says how much our validation costs on top.
"""

from __future__ import annotations

import re

from coa_envs.bench import realistic_turn
from coa_envs.protocol import parse_turn

TURN = realistic_turn()
assert parse_turn(TURN).ok
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

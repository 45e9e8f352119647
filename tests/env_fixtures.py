"""Per-id ``gym.make`` options for the all-ids test.

Ids whose data cannot ship with the package (gated or canary-protected benchmarks) are
tested on small fixtures in their official formats; add an entry here when registering
such an id. Ids not listed are made with no options (their data ships).
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent

_WEB = FIXTURES / "web_envs" / "fixtures"  # invented tasks in each benchmark's official format
_CODE = FIXTURES / "sandbox" / "fixtures" / "livecodebench_oracle.jsonl"  # official jsonl format
MAKE_KWARGS: dict[str, dict] = {
    "coa/GAIA-v1": {"data_path": str(_WEB / "gaia")},
    "coa/GAIA-v0": {"data_path": str(_WEB / "gaia")},
    "coa/BrowseComp-v1": {"data_path": str(_WEB / "browse_comp_test_set.csv")},
    "coa/HLE-v1": {"data_path": str(_WEB / "hle")},
    # No reference solutions ship with LiveCodeBench: four of its problems with our own.
    "coa/LiveCodeBench-v4": {"data_path": str(_CODE)},
    "coa/LiveCodeBench-v5": {"data_path": str(_CODE)},
}
# Only NQ's questions ship; the other QA benchmarks run on 3-question fixtures, one per source format.
_MHQA = FIXTURES / "mhqa" / "fixtures"
MAKE_KWARGS.update({
    f"coa/{env}-v1": {"data_path": str(_MHQA / name)}
    for env, name in [("HotpotQA", "hotpotqa.json"), ("2Wiki", "flashrag.jsonl"), ("MuSiQue", "musique.jsonl"),
                      ("Bamboogle", "seed.jsonl"), ("TriviaQA", "triviaqa.jsonl"), ("PopQA", "popqa.jsonl")]
})

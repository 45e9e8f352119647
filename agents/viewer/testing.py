"""Runs for testing and demonstrating the viewer: every shape the page must cope with.

:func:`write_showcase_run` writes a run whose episodes use every CoA role, a tool call and
its observation, a malformed action, a truncation, model output that is HTML and script,
fields the viewer does not know, a structured status, a torn line in the middle and a
text-only episode; with a tokenizer it adds token ids exactly as a sampling policy records
them (prompt through the chat template, each segment on its own) and names the tokenizer in
``summary.json`` as ``coa eval`` does. :func:`write_large_run` writes a file of a given size
for the paging and memory tests. Nothing here is used by the viewer itself.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from agents.trajectory import Trajectory

__all__ = ["SHOWCASE_ENV", "XSS_MARK", "write_large_run", "write_showcase_run"]

SHOWCASE_ENV = "coa/MATH500-v1"
#: Set on ``window`` by the script in the hostile episode if the page ever ran it.
XSS_MARK = "__coaViewerXss"
_SYSTEM = "Solve the problem as a small team would, in tagged blocks; run code with <code>; end with <answer>."
_OBS = "\n<observation>\n{}\n</observation>\n\n"


def _episode(task: str, question: str, turns: list[tuple[str, str | None]], **fields: Any) -> Trajectory:
    trajectory = Trajectory(env_id=fields.pop("env_id", SHOWCASE_ENV), task_id=task,
                            prompt_messages=[{"role": "system", "content": _SYSTEM},
                                             {"role": "user", "content": question}], **fields)
    for action, observation in turns:
        trajectory.add_generated(action)
        if observation is not None:
            trajectory.add_observation(_OBS.format(observation))
    return trajectory


def _showcase() -> list[Trajectory]:
    solved = _episode("math-0001", "What is 17 * 23?", [
        ("<plan>\nMultiply with code, then check the product by hand.\n</plan>\n"
         "<think>\n17 * 23 is about 400; code gives the exact value.\n</think>\n<code>print(17 * 23)</code>", "391"),
        ("<reflection>\nThe code printed 391, close to the estimate.\n</reflection>\n"
         "<suggested_answer>391</suggested_answer>\n"
         "<double_check>\n17 * 20 = 340 and 17 * 3 = 51; 340 + 51 = 391.\n</double_check>\n"
         "<answer>\\boxed{391}</answer>", None),
    ], reward=1.0, terminated=True, answer="\\boxed{391}", tool_calls={"code": 1}, seed=11,
        info={"reward_details": {"equivalent": True, "method": "math-verify", "gold": "391",
                                 "prediction": "391"}, "wall_s": 0.42})
    malformed = _episode("math-0002", "What is 2 ** 10?", [
        ("<think>\nPowers of two double each time.", "The turn has an unclosed <think>; close every tag."),
        ("<think>\n2 ** 10 = 1000.\n</think>\n<answer>\\boxed{1000}</answer>", None),
    ], reward=0.0, terminated=True, answer="\\boxed{1000}", tool_errors={"action": 1}, seed=12,
        info={"reward_details": {"equivalent": False, "method": "math-verify", "gold": "1024",
                                 "prediction": "1000"}})
    truncated = _episode("math-0003", "Sum the first 100 odd numbers.", [
        ("<think>\nThe sum of the first n odd numbers is n squared.\n</think>\n"
         "<code>print(sum(range(1, 200, 2)))</code>", "10000"),
        ("<code>print(100 ** 2)</code>", "10000"),
    ], reward=0.0, truncated=True, status="truncated:max_turns", tool_calls={"code": 2}, seed=13)
    hostile = _episode("math-0004", "Render <b>this</b>?", [
        (f'<think>\n<img src=x onerror="window.{XSS_MARK}=1"><script>window.{XSS_MARK}=2</script>\n</think>\n'
         "<code>print('</script><script>alert(1)</script>')</code>",
         f"</script><script>window.{XSS_MARK}=3</script><iframe src=javascript:alert(4)>"),
        ("<answer><b>bold</b> &amp; <a href=javascript:alert(5)>link</a></answer>", None),
    ], reward=0.0, terminated=True, answer="<b>bold</b> &amp; <a href=javascript:alert(5)>link</a>",
        tool_calls={"code": 1}, seed=14)
    timed_out = _episode("math-0005", "Factor 391.", [
        ("<think>\nTry small primes.\n</think>\n<code>import sympy; print(sympy.factorint(391))</code>",
         "Error: the code ran past its 10 s limit"),
    ], reward=0.0, status="error:timeout", tool_calls={"code": 1}, tool_errors={"code": 1}, seed=15)
    return [solved, malformed, truncated, hostile, timed_out]


def _with_ids(trajectory: Trajectory, tokenizer: Any) -> Trajectory:
    trajectory.prompt_ids = list(tokenizer.apply_chat_template(trajectory.prompt_messages, add_generation_prompt=True,
                                                               tokenize=True, return_dict=False))
    for segment in trajectory.segments:
        segment.token_ids = tokenizer.encode(segment.text, add_special_tokens=False)
    return trajectory


def write_showcase_run(directory: str | Path, tokenizer: Any = None, tokenizer_dir: str | Path | None = None) -> Path:
    """Write ``directory/trajectories.jsonl`` (+ ``summary.json``); returns the directory.

    Lines: five episodes (with token ids when ``tokenizer`` is given), a line cut off in the
    middle, an episode with unknown fields and a structured status, a text-only episode.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lines = [(_with_ids(t, tokenizer) if tokenizer is not None else t).to_json() for t in _showcase()]
    lines.append(lines[0][: len(lines[0]) // 2])  # a torn line with more lines after it
    extra = json.loads(_showcase()[0].to_json())
    extra.update(task_id="math-0006", status={"kind": "error", "detail": "engine"}, judge_notes={"rater": "r2"})
    extra["segments"][0]["role"] = "assistant"
    lines.append(json.dumps(extra))
    text_only = _showcase()[0]
    text_only.task_id, text_only.sample_index = "math-0001", 1
    lines.append(text_only.to_json())
    (directory / "trajectories.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = {"env_id": SHOWCASE_ENV, "agent": "showcase", "episodes": len(lines) - 1}
    if tokenizer_dir is not None:
        summary["model"] = str(tokenizer_dir)
    (directory / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return directory


def write_large_run(path: str | Path, target_bytes: int, seed: int = 0, broken_every: int = 997) -> dict[str, Any]:
    """Append episodes to ``path`` until it holds ``target_bytes``; returns what it wrote.

    Episodes carry token ids and observations of realistic size (about 5 kB a line); every
    ``broken_every``-th line is cut off. The result maps ``lines`` to the number of lines,
    ``last`` to the last readable episode's ``(task_id, reward)`` and ``rewards`` to their sum.
    """
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written, lines, reward_sum, last = 0, 0, 0.0, ("", 0.0)
    with open(path, "w", encoding="utf-8") as handle:
        while written < target_bytes:
            lines += 1
            task = f"large-{lines // 4:06d}"
            reward = float(rng.random() < 0.4)
            trajectory = Trajectory(env_id=("coa/SynthHop-v0", "coa/MATH500-v1")[lines % 2], task_id=task,
                                    prompt_text=f"Question {lines}?", prompt_ids=list(range(1, 60)),
                                    reward=reward, sample_index=lines % 4, terminated=True,
                                    status=("ok", "truncated:max_turns", "error:timeout")[lines % 3],
                                    tool_calls={"wiki_search": lines % 5}, tool_errors={"action": int(lines % 7 == 0)})
            for turn in range(1 + lines % 4):
                ids = [rng.randrange(500) for _ in range(60)]
                trajectory.add_generated(f"<think>step {turn}</think><wiki_search>q {lines}</wiki_search>", ids)
                trajectory.add_observation(_OBS.format("passage text " * 40), ids[:50])
            line = trajectory.to_json()
            if lines % broken_every == 0:
                line = line[: len(line) // 3]
            else:
                reward_sum += reward
                last = (task, reward)
            handle.write(line + "\n")
            written += len(line.encode("utf-8")) + 1
    return {"lines": lines, "last": last, "rewards": reward_sum, "bytes": written}

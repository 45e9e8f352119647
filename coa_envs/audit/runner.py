"""Play the degenerate policies on an env's tasks and report the best reward each reached.

What ``coa audit-reward ENV`` prints. The env scores every episode with its own reward, so a
reward block of your own (``reward={...}`` or a registered id of yours) is audited as it is
configured. For each policy: the mean and the best total reward, the mean and the best score
of the *primary* (correctness) term, the episodes the reward could not score (a reward error:
no verdict) and those scored on public tests only. A correctness term that pays a degenerate
policy anything is listed in :attr:`AuditReport.leaks`; shaping terms (format, tool use) show
up in the total but not in the primary score. Group terms (scored over a group of samples)
are left pending here.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from coa_envs.audit.policies import Context, DegeneratePolicy, policies_for
from coa_envs.rewards.compose import primary_failed, primary_score

__all__ = ["AuditReport", "PolicyResult", "audit_env"]


@dataclass(slots=True)
class PolicyResult:
    """How one degenerate policy fared over the audited tasks."""

    name: str
    kind: str
    description: str
    episodes: int = 0
    rewards: list[float] = field(default_factory=list)
    primary: list[float] = field(default_factory=list)
    unscored: int = 0
    public_tests_only: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def best_reward(self) -> float:
        return max(self.rewards, default=0.0)

    @property
    def best_primary(self) -> float:
        return max(self.primary, default=0.0)

    def summary(self) -> dict[str, Any]:
        mean = statistics.fmean
        return {"name": self.name, "kind": self.kind, "description": self.description, "episodes": self.episodes,
                "mean_reward": mean(self.rewards) if self.rewards else 0.0, "best_reward": self.best_reward,
                "mean_primary": mean(self.primary) if self.primary else 0.0, "best_primary": self.best_primary,
                "unscored": self.unscored, "public_tests_only": self.public_tests_only, "errors": self.errors[:3]}


@dataclass(slots=True)
class AuditReport:
    env_id: str
    reward: Any
    tasks: list[str]
    results: list[PolicyResult]
    gold_hygiene: list[dict[str, Any]] = field(default_factory=list)

    @property
    def leaks(self) -> list[PolicyResult]:
        """Policies whose correctness score went above 0 on tests that are not public-only."""
        return [r for r in self.results if r.best_primary > 0 and r.public_tests_only < r.episodes]

    def to_dict(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "reward": self.reward, "tasks": self.tasks,
                "policies": [r.summary() for r in self.results], "leaks": [r.name for r in self.leaks],
                "gold_hygiene": self.gold_hygiene}


def _play(env: Any, policy: DegeneratePolicy, context: Context, task_id: str, max_turns: int) -> tuple:
    env.reset(options={"task_id": task_id})
    script = policy.play(context)
    action = next(script)
    for _ in range(max_turns):
        observation, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info, terminated
        try:
            action = script.send(observation)
        except StopIteration:
            action = "<answer></answer>"
    return 0.0, {}, False


def audit_env(env_id: str, *, n_tasks: int = 5, policies: Sequence[str] | None = None,
              make_kwargs: Mapping[str, Any] | None = None) -> AuditReport:
    """Play each applicable degenerate policy on the first ``n_tasks`` tasks of ``env_id``."""
    import gymnasium as gym

    from coa_envs.tasks.hygiene import REPORTS

    env = gym.make(env_id, **dict(make_kwargs or {}))
    try:
        core = env.unwrapped
        tasks = list(core.tasks[:n_tasks])
        if not tasks:
            raise ValueError(f"{env_id} has no tasks to audit")
        results = []
        for policy in policies_for(Context(tasks[0].question, core.config.family, tuple(core.tool_names)),
                                   list(policies) if policies else None):
            result = PolicyResult(policy.name, policy.kind, policy.description)
            for task in tasks:
                context = Context(task.question, core.config.family, tuple(core.tool_names))
                reward, info, terminated = _play(env, policy, context, task.task_id, core.config.max_turns)
                details = info.get("reward_details") or {}
                result.episodes += 1
                if info.get("reward_error"):
                    result.errors.append(str(info["reward_error"])[:200])
                if terminated and info.get("reward_error") and ("terms" not in details or primary_failed(details)):
                    result.unscored += 1
                    continue
                result.rewards.append(float(reward))
                score = primary_score(details)
                result.primary.append(float(reward if score is None else score))
                result.public_tests_only += bool(details.get("public_tests_only"))
            results.append(result)
        hygiene = [asdict(r) for r in REPORTS.values()]
        return AuditReport(env_id, dict(core.config.reward), [t.task_id for t in tasks], results, hygiene)
    finally:
        env.close()

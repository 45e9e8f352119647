"""The gymnasium envs RL episodes run in: training tasks, held-out tasks, or a remote server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.rl.config import RLConfig

__all__ = ["make_env"]


def make_env(config: RLConfig, heldout: bool = False, env_index: int = 0) -> Any:
    """``gymnasium.make`` of the configured env (entry ``env_index`` of a mixture) on its
    training tasks (``task_options.split``, default ``train``; only those of ``env.task_list``
    when set), or with ``heldout`` on its held-out tasks (``split: test``, ``env.eval_kwargs``
    merged over its kwargs); a remote client when ``env.url`` is set. Registers the coa ids
    on import."""
    import gymnasium as gym

    import coa_envs  # noqa: F401 - registers the ids
    from trainers.common import deep_merge

    entry = config.env.mixture[env_index]
    kwargs = {"max_turns": config.env.max_turns, **entry.env_kwargs}
    if heldout:
        kwargs = deep_merge(kwargs, config.env.eval_kwargs)
    options = dict(kwargs.get("task_options") or {})
    kwargs["task_options"] = {**options, "split": "test" if heldout
                              else options.get("split", "train")}
    if config.env.task_list and not heldout:  # a filtered list of training tasks (coa filter-tasks)
        kwargs["task_options"]["task_list"] = config.env.task_list
    if config.env.url:  # the env runs in a `coa serve-env` server; this is its client
        from coa_envs.registry import REMOTE_ID

        return gym.make(REMOTE_ID, base_url=config.env.url, env_id=entry.id, overrides=kwargs)
    return gym.make(entry.id, **kwargs)

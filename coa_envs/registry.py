"""The registry: ``envs_registry.yaml`` is the only place an env id is declared.

On ``import coa_envs`` every entry is registered with Gymnasium under its ``coa/<Task>-vN``
id; ``gym.make(id, **overrides)`` then builds a validated :class:`EnvConfig` and a
:class:`CoAEnv`. The YAML ships inside the package so that a non-editable install sees the
same ids as a checkout.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

import gymnasium as gym

__all__ = ["REMOTE_ID", "check_id", "describe", "entries", "entry", "ids", "make_env", "register_all", "resolve_path",
           "suggest_id"]

from coa_envs.tasks import resolve_path  # re-exported: loaders and users resolve pkg: paths here


@lru_cache(maxsize=1)
def _load() -> dict[str, dict[str, Any]]:
    import yaml

    text = resources.files("coa_envs").joinpath("envs_registry.yaml").read_text(encoding="utf-8")
    # libyaml's loader when present: the pure-Python one was most of `import coa_envs`.
    document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    defaults = document.get("defaults") or {}
    result: dict[str, dict[str, Any]] = {}
    for raw in document.get("envs") or []:
        item = {**defaults, **raw}
        env_id = item.get("id")
        if not env_id or not str(env_id).startswith("coa/"):
            raise ValueError(f"envs_registry.yaml: entry {raw!r} needs an id of the form coa/<Task>-vN")
        if env_id in result:
            raise ValueError(f"envs_registry.yaml: {env_id} is declared twice")
        if "family" not in item:
            raise ValueError(f"envs_registry.yaml: {env_id} has no family")
        result[env_id] = item
    return result


def entries() -> dict[str, dict[str, Any]]:
    return {k: dict(v) for k, v in _load().items()}


def entry(env_id: str) -> dict[str, Any]:
    return dict(_load()[env_id])


def ids() -> list[str]:
    return list(_load())


def make_env(env_id: str, **overrides: Any):
    """Gymnasium entry point: registry entry + per-call overrides -> a validated CoAEnv."""
    from coa_envs.config import build_config
    from coa_envs.env import CoAEnv

    return CoAEnv(build_config(entry(env_id), overrides))


REMOTE_ID = "coa/Remote-v0"


def register_all() -> None:
    for env_id in _load():
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, entry_point="coa_envs.registry:make_env", kwargs={"env_id": env_id})
    # Not a task set but a client: any id above, served by `coa serve-env` elsewhere
    # (gym.make(REMOTE_ID, base_url=..., env_id=...)). Kept out of ids(): it needs a server.
    if REMOTE_ID not in gym.registry:
        gym.register(id=REMOTE_ID, entry_point="coa_envs.service.client:RemoteEnv")
    _silence_dataset_version_warnings()
    _suggest_ids_case_insensitively()


def suggest_id(env_id: str) -> str:
    """`` (did you mean 'coa/MATH500-v1'?)`` for a mistyped id (another case, a missing or wrong
    version, a missing namespace); ``""`` when nothing is close."""
    import re

    from coa_envs.options import closest

    known = [*_load(), REMOTE_ID]
    match = next((k for k in known if k.lower() == env_id.lower()), None)
    if match is None:  # compare the names alone ("coa/" and "-v0" would make any two ids look alike)
        by_name: dict[str, str] = {}
        for candidate in known:
            by_name.setdefault(re.sub(r"-v\d+$", "", candidate.rpartition("/")[2]), candidate)
        name = closest(re.sub(r"-v\d+$", "", env_id.rpartition("/")[2]), by_name)
        match = by_name.get(name) if name is not None else None
    return f" (did you mean {match!r}?)" if match is not None and match != env_id else ""


def check_id(env_id: str) -> str:
    """``env_id`` if registered, else a ``gymnasium.error.UnregisteredEnv`` with a suggestion and
    where the list is (``coa list``): what every coa command says about a mistyped id."""
    if env_id in _load() or env_id == REMOTE_ID:
        return env_id
    raise gym.error.UnregisteredEnv(f"no env {env_id!r} is registered{suggest_id(env_id)}; `coa list` shows "
                                    "every id")


def _suggest_ids_case_insensitively() -> None:
    """Gymnasium suggests a close name only with the same case (``coa/math500-v0`` got no hint):
    its name check is wrapped so a miss in the ``coa`` namespace gets our suggestion. Other
    namespaces, and any Gymnasium without that private helper, are left as they are."""
    from gymnasium.envs import registration

    original = getattr(registration, "_check_name_exists", None)
    if original is None or getattr(original, "_coa_wrapped", False):
        return

    def check_name_exists(ns: str | None, name: str) -> None:
        try:
            original(ns, name)
        except gym.error.NameNotFound as exc:
            if ns != "coa" or "Did you mean" in str(exc):
                raise
            hint = suggest_id(f"coa/{name}")
            if not hint:
                raise
            raise gym.error.NameNotFound(f"{exc}{hint}") from None

    check_name_exists._coa_wrapped = True  # type: ignore[attr-defined]
    registration._check_name_exists = check_name_exists


def _silence_dataset_version_warnings() -> None:
    """``-vN`` of some ids names a dataset release (LiveCodeBench v4 and v5 are different task
    sets), not a revision of the env; Gymnasium would tell users of v4 to "upgrade" to v5."""
    import warnings

    for env_id, item in _load().items():
        name = env_id.rpartition("-v")[0]
        if item.get("family") != "code":
            continue  # elsewhere -vN is a revision: the warning for an old one is the policy's
        if any(other.startswith(f"{name}-v") and other != env_id for other in _load()):
            warnings.filterwarnings(
                "ignore", message=rf".*environment {env_id} is out of date", category=DeprecationWarning
            )


def describe(env_id: str) -> Mapping[str, Any]:
    import importlib

    from coa_envs.rewards.compose import describe_reward

    item = entry(env_id)
    family = importlib.import_module(f"coa_envs.tasks.{item['family']}")
    return {
        "id": env_id,
        "family": item["family"],
        "tools": {name: (cfg or {}).get("backend", "default") for name, cfg in (item.get("tools") or {}).items()},
        "reward": describe_reward(item.get("reward") or {}),
        "max_turns": item.get("max_turns"),
        "split": family.SPLIT_NOTE,  # test set, or how training and held-out tasks are partitioned
        "description": item.get("description", ""),
    }

"""A reward as a weighted list of versioned terms: the one place terms are combined.

A registry entry or a ``gym.make`` override declares the reward in one of two forms::

    reward: {name: em_f1, metric: f1}                     # one term, weight 1 (every id so far)
    reward:
      terms:
        - {name: em_f1, weight: 1.0}
        - {name: format, weight: 0.1, required: [think, answer]}
        - {name: group_length, weight: 0.2}
      primary: em_f1                                      # optional; default: the first term

Keys of a term entry besides ``name``, ``weight`` and ``label`` are the term's own options
(``build(**options)`` of ``coa_envs.rewards.<name>``). A dotted ``name`` (``my_pkg.my_term``)
imports a term module of your own with the same contract (``VERSION``, ``build``). ``label``
names a term in reports (default: its name) so one term can appear twice with different options.

Arithmetic: the reward is ``sum(weight * score)`` over the terms, nothing else: no
normalisation and no clipping, so the single-term form gives exactly the term's own score.
Episode terms (answer rewards included) are summed by the env when the episode ends; group
terms are added by :meth:`ComposedReward.score_group` once the K samples of a task are in.

Reporting (``info["reward_details"]``): the *primary* term's own details stay at the top
level, as they were when every env had one reward (``em``, ``f1``, ``scorer``, ``tests``...);
``primary`` names that term and ``terms`` maps each label to its ``name``, ``version``,
``scope``, ``weight``, ``score``, ``weighted`` and ``details`` (the primary's details are
not repeated there), or ``error`` when the term failed: a failing term scores 0 and the
other terms still count. A term that raises :class:`~coa_envs.rewards.base.RewardUnavailable`
(no verdict, e.g. its judge is down) keeps its details beside the error; when it is the
primary term the episode is *unscored* (:func:`primary_failed`): eval and RL leave it out of
accuracy and loss instead of counting it wrong. Group terms read ``pending: true`` until scored. The primary term
is the correctness signal: accuracy, pass@k and pass-rate filtering read its score, not the
shaped total.
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coa_envs.options import Schema, did_you_mean
from coa_envs.rewards.base import EpisodeView, RewardUnavailable, Scope
from coa_envs.types import RewardResult, Task

__all__ = [
    "NOT_TERMS",
    "ComposedReward",
    "TermSpec",
    "build_composed",
    "describe_reward",
    "parse_reward_config",
    "primary_failed",
    "primary_score",
    "term_errors",
    "total_of",
]

log = logging.getLogger(__name__)

NOT_TERMS = frozenset({"base", "compose"})  # modules of this package that are not terms
_ENTRY_KEYS = frozenset({"name", "weight", "label"})


@dataclass(frozen=True, slots=True)
class TermSpec:
    """One declared term: what to build and how much it counts."""

    label: str
    name: str
    weight: float
    options: Mapping[str, Any]


def _weight(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}.weight={value!r} is not valid; allowed: a finite number")
    return float(value)


def parse_reward_config(config: Mapping[str, Any], available: Sequence[str]) -> tuple[list[TermSpec], str]:
    """The terms and the primary label of a ``reward:`` block, validated (names, weights,
    labels); raises ``ValueError`` naming the key and the allowed values."""
    if not isinstance(config, Mapping):
        raise ValueError(f"reward={config!r} is not valid; allowed: a mapping {{name: ...}} or {{terms: [...]}}")
    if "terms" in config:
        extra = set(config) - {"terms", "primary"}
        if extra:
            raise ValueError(f"reward: keys {sorted(extra)} are not valid beside terms; put a term's "
                             "options inside its entry (allowed here: terms, primary)")
        entries = config["terms"]
        if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
            raise ValueError(f"reward.terms={entries!r} is not valid; allowed: a non-empty list of "
                             "{name: <term>, weight: <number>, ...options}")
    else:
        entries = [{**config, "weight": 1.0}]
    specs: list[TermSpec] = []
    for index, entry in enumerate(entries):
        where = f"reward.terms[{index}]" if "terms" in config else "reward"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}={entry!r} is not valid; allowed: a mapping {{name: ..., weight: ...}}")
        name = entry.get("name")
        if name not in available and not (isinstance(name, str) and "." in name):
            raise ValueError(f"{where}.name={name!r} is not valid{did_you_mean(name, available)}; allowed: "
                             f"{sorted(available)} or the dotted name of a term module of yours")
        label = entry.get("label", name)
        if not isinstance(label, str) or not label:
            raise ValueError(f"{where}.label={label!r} is not valid; allowed: a non-empty string")
        if any(s.label == label for s in specs):
            raise ValueError(f"{where}: two terms are labelled {label!r}; give one a distinct label: ...")
        options = {k: v for k, v in entry.items() if k not in _ENTRY_KEYS}
        specs.append(TermSpec(label, name, _weight(entry.get("weight", 1.0), where), options))
    primary = config.get("primary", specs[0].label) if "terms" in config else specs[0].label
    if primary not in [s.label for s in specs]:
        raise ValueError(f"reward.primary={primary!r} is not valid; allowed: {[s.label for s in specs]}")
    return specs, primary


def describe_reward(config: Mapping[str, Any]) -> str:
    """A short text of a reward block for listings: ``em_f1`` or ``em_f1 + 0.1*format``."""
    if "terms" not in config:
        return str(config.get("name"))
    parts = []
    for entry in config.get("terms") or ():
        weight = entry.get("weight", 1.0)
        label = entry.get("label", entry.get("name"))
        parts.append(str(label) if weight == 1 else f"{weight:g}*{label}")
    return " + ".join(parts).replace("+ -", "- ")


class _Term:
    """A built term: its spec, version, scope and the callable that scores it."""

    __slots__ = ("impl", "kind", "scope", "spec", "version")

    def __init__(self, spec: TermSpec):
        path = spec.name if "." in spec.name else f"coa_envs.rewards.{spec.name}"
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            raise ValueError(f"reward term {spec.label!r}: cannot import {path}: {exc}") from None
        version = getattr(module, "VERSION", None)
        if isinstance(version, bool) or not isinstance(version, int) or not callable(getattr(module, "build", None)):
            raise ValueError(f"reward term module {path} needs an integer VERSION and a build(**options)")
        self.spec, self.version = spec, version
        # the term's options, named and typed by its build() (a "did you mean" for a near miss)
        Schema.of_callable(f"reward term {spec.label!r} ({spec.name})", module.build).check(spec.options)
        try:
            self.impl = module.build(**spec.options)
        except TypeError as exc:  # an unknown option: say which term
            raise ValueError(f"reward term {spec.label!r} ({spec.name}): {exc}") from None
        if callable(getattr(self.impl, "score_group", None)):
            self.kind: str = "group"
        elif callable(getattr(self.impl, "score", None)):
            self.kind = "episode"
        elif callable(self.impl):
            self.kind = "answer"
        else:
            raise ValueError(f"{path}.build returned {self.impl!r}: not a reward term")
        self.scope: Scope = "group" if self.kind == "group" else "episode"

    def entry(self) -> dict[str, Any]:
        return {"name": self.spec.name, "version": self.version, "scope": self.scope,
                "weight": self.spec.weight}

    def score_one(self, episode: EpisodeView) -> RewardResult:
        if self.kind == "answer":
            return self.impl(episode.answer or "", episode.task)
        return self.impl.score(episode)


def _checked(result: Any, label: str) -> RewardResult:
    if not isinstance(result, RewardResult):
        raise TypeError(f"term {label!r} returned {type(result).__name__}, not a RewardResult")
    score = result.score
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise ValueError(f"term {label!r} returned the score {score!r}; a term must return a finite number")
    return result


def _failure(term: _Term, exc: BaseException, task_id: str | None) -> dict[str, Any]:
    log.warning("reward term %s failed on task %s: %s: %s", term.spec.label, task_id,
                type(exc).__name__, exc, exc_info=None if isinstance(exc, RewardUnavailable) else exc)
    entry = {**term.entry(), "score": 0.0, "weighted": 0.0, "error": f"{type(exc).__name__}: {exc}"[:500]}
    if isinstance(exc, RewardUnavailable):
        entry["details"] = dict(exc.details)
    return entry


def _scored(term: _Term, result: RewardResult, with_details: bool = True) -> dict[str, Any]:
    score = float(result.score)
    entry = {**term.entry(), "score": score, "weighted": term.spec.weight * score}
    if with_details:
        entry["details"] = dict(result.details)
    return entry


def primary_score(details: Mapping[str, Any] | None) -> float | None:
    """The primary term's score from ``reward_details`` (None without a scored primary)."""
    if not details or "terms" not in details:
        return None
    entry = details["terms"].get(details.get("primary"))
    return None if entry is None or entry.get("score") is None else float(entry["score"])


def primary_failed(details: Mapping[str, Any] | None) -> bool:
    """True when the primary term gave no verdict (it raised): the episode is unscored."""
    if not details or "terms" not in details:
        return False
    entry = details["terms"].get(details.get("primary")) or {}
    return bool(entry.get("error"))


def term_errors(details: Mapping[str, Any] | None) -> str | None:
    """``"label: error; ..."`` for the terms of a ``reward_details`` that failed (None if none
    did): what ``info["reward_error"]`` says."""
    terms = (details or {}).get("terms") or {}
    failed = [f"{label}: {entry['error']}" for label, entry in terms.items() if entry.get("error")]
    return "; ".join(failed) or None


def total_of(details: Mapping[str, Any]) -> float:
    """The reward a ``reward_details`` adds up to: the sum of its scored terms' ``weighted``."""
    return sum(float(e["weighted"]) for e in details.get("terms", {}).values() if e.get("weighted") is not None)


class ComposedReward:
    """Weighted terms with per-term reporting; what ``build_reward`` returns for every config.

    Also a plain :class:`~coa_envs.types.Reward` (``reward(prediction, task)``): called that way
    the episode terms see only the answer.
    """

    def __init__(self, terms: Sequence[_Term], primary: str):
        self.terms = tuple(terms)
        self.primary = primary
        if next(t for t in self.terms if t.spec.label == primary).scope != "episode":
            raise ValueError(f"reward.primary={primary!r} is a group term; the primary term scores "
                             "correctness per episode (put an answer or episode term first)")
        self.episode_terms = tuple(t for t in self.terms if t.scope == "episode")
        self.group_terms = tuple(t for t in self.terms if t.scope == "group")

    def score_episode(self, episode: EpisodeView) -> RewardResult:
        """Score the episode terms; group terms are listed as pending. Never raises."""
        task_id = episode.task.task_id if episode.task is not None else None
        terms: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for term in self.episode_terms:
            label = term.spec.label
            try:
                result = _checked(term.score_one(episode), label)
            except Exception as exc:  # a failing term scores 0; the episode and other terms go on
                terms[label] = _failure(term, exc, task_id)
                if label == self.primary and isinstance(exc, RewardUnavailable):
                    top = terms[label].pop("details")  # what the judge said (or did not), at the top as usual
                continue
            is_primary = label == self.primary
            terms[label] = _scored(term, result, with_details=not is_primary)
            if is_primary:
                top = dict(result.details)
        for term in self.group_terms:
            terms[term.spec.label] = {**term.entry(), "score": None, "weighted": None, "pending": True}
        details = {**top, "primary": self.primary, "terms": terms}
        return RewardResult(total_of(details), details)

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        return self.score_episode(EpisodeView(task=task, answer=prediction))

    def score_group(self, episodes: Sequence[EpisodeView],
                    details: Sequence[Mapping[str, Any] | None]) -> list[RewardResult]:
        """Add the group terms to the K samples of one task.

        ``details[i]`` is episode ``i``'s ``reward_details`` from the env (None for an
        episode that ended without an answer). Returns each episode's new reward (episode
        terms plus weighted group terms) and details. Scoring again replaces the group
        terms, so applying it twice gives the same result. Never raises.
        """
        if len(details) != len(episodes):
            raise ValueError(f"{len(episodes)} episodes but {len(details)} reward_details")
        merged, bases = [], []
        for episode, before in zip(episodes, details, strict=True):
            copy = dict(before or {"primary": self.primary})
            copy["terms"] = dict(copy.get("terms") or {})
            merged.append(copy)
            # What the episode earned before the group terms: its episode terms, or (a record
            # scored without terms, e.g. an older file) the reward it was given.
            episode_entries = [e for e in copy["terms"].values() if e.get("scope") != "group"]
            bases.append(sum(float(e.get("weighted") or 0.0) for e in episode_entries)
                         if before is not None and "terms" in before else float(episode.reward or 0.0))
        for term in self.group_terms:
            label = term.spec.label
            try:
                results = list(term.impl.score_group(list(episodes)))
                if len(results) != len(episodes):
                    raise ValueError(f"returned {len(results)} results for {len(episodes)} episodes")
                entries = [_scored(term, _checked(r, label)) for r in results]
            except Exception as exc:  # the whole term fails for this group: 0 for each sample
                task = episodes[0].task if episodes else None
                failed = _failure(term, exc, task.task_id if task is not None else None)
                entries = [dict(failed) for _ in episodes]
            for copy, entry in zip(merged, entries, strict=True):
                copy["terms"][label] = entry
        return [RewardResult(base + sum(float(copy["terms"][t.spec.label]["weighted"]) for t in self.group_terms), copy)
                for base, copy in zip(bases, merged, strict=True)]

    def close(self) -> None:
        for term in self.terms:
            closer = getattr(term.impl, "close", None)
            if callable(closer):
                closer()


def build_composed(config: Mapping[str, Any], available: Sequence[str]) -> ComposedReward:
    specs, primary = parse_reward_config(config, available)
    return ComposedReward([_Term(spec) for spec in specs], primary)

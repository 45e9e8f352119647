"""The sections of ``RLConfig`` (``trainers/rl/config.py``), each validating its own keys.

Defaults are DAPO's (the default ``algorithm.name``); :func:`trainers.rl.config.load_config`
swaps in another algorithm's preset for the keys the user leaves out. Messages name the
dotted key and what to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from trainers.common.config import ConfigError, check_fields
from trainers.common.mixture import MixtureEntry, check_env_ids, mixture_entries
from trainers.common.model import ModelSection as CommonModelSection
from trainers.common.sections import at_least
from trainers.rl.resources import ResourcesSection

__all__ = ["AlgorithmSection", "EnvSection", "ModelSection", "ResourcesSection",
           "RolloutSection", "WarmStartSection"]




@dataclass
class AlgorithmSection:
    """What is optimised and how: PPO (critic + GAE), GRPO (group-relative advantages) or DAPO
    (GRPO + clip-higher, dynamic sampling, token-level loss, overlong shaping)."""

    name: Literal["ppo", "grpo", "dapo"] = "dapo"
    """The algorithm; its preset fills the keys below that a config leaves out."""
    # -- batch and optimiser ------------------------------------------------------------
    total_steps: int = 20
    """RL steps (sample a batch, update, sync weights)."""
    prompts_per_step: int = 4
    """Prompt groups per step; the batch is prompts_per_step * group_size episodes."""
    group_size: int = 8
    """Samples per prompt (GRPO/DAPO compare them; PPO may use 1)."""
    minibatch_size: int = 16
    """Episodes per optimiser step; the batch is split into minibatches of about this size."""
    ppo_epochs: int = 1
    """Passes over the batch per step."""
    lr: float = 1e-5
    """Policy learning rate (AdamW)."""
    critic_lr: float = 1e-5
    """Value head / critic learning rate (load_config sets it to ``lr`` when left out)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of the policy's parameters in each optimiser step."""
    critic_max_grad_norm: float = 1.0
    """Gradient-norm clip of the value head / critic, apart from the policy's: a fresh value
    head's large early gradients would otherwise shrink the policy step with them."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate shape over total_steps after the warm-up (linear/cosine decay to 0)."""
    lr_warmup_steps: int = 0
    """RL steps of linear warm-up from 0 to lr (the first updates rest on a fresh critic and
    noisy advantages)."""
    # -- policy loss ---------------------------------------------------------------------
    clip_eps_low: float = 0.2
    """Lower clip of the importance ratio: 1 - clip_eps_low."""
    clip_eps_high: float = 0.28
    """Upper clip: 1 + clip_eps_high (DAPO's clip-higher raises it above clip_eps_low)."""
    clip_ratio_c: float = 3.0
    """Dual clip: the loss of a token with negative advantage is capped at -A * clip_ratio_c,
    so a stale or mismatched rollout logprob (importance ratio 50) cannot dominate a batch.
    0 turns it off; otherwise it must be > 1."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """token-mean: every generated token weighs the same (DAPO, PPO); seq-mean-token-mean:
    mean per episode, then over episodes (GRPO); seq-mean-token-sum: sum per episode."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus in the loss (0 = entropy is only logged)."""
    # -- asynchronous rollouts and off-policy correction ------------------------------------
    max_staleness: int = 0
    """Asynchronous RL: rollout workers generate continuously while the learner updates,
    and no episode is trained on more than this many policy versions after it started
    (counted per episode). 0 = the synchronous loop (generate, then update). With k >= 1
    new weights reach the workers between turns (interrupting a turn in flight, which
    resumes under the new weights), every token records the version that produced it, and
    ``importance_correction`` says how the loss corrects for the lag."""
    importance_correction: Literal["behaviour", "decoupled", "tis", "mis"] = "behaviour"
    """How the loss treats rollouts from an older policy (w = π_learner / π_rollout per token,
    ``trainers/rl/algorithms.py::importance_weights``): ``behaviour`` anchors the clipped
    ratio on the rollout logprobs (no weights); ``decoupled`` (AReaL) anchors it on the
    learner's recomputed (proximal) logprobs and weights tokens by w, dropping those above
    ``importance_cap``; ``tis`` truncates w at the cap; ``mis`` masks tokens with w outside
    [``importance_floor``, ``importance_cap``]."""
    importance_cap: float = 2.0
    """Upper cap C of the importance weight (tis: min(w, C); decoupled, mis: drop w > C;
    0 = no cap for decoupled)."""
    importance_floor: float = 0.0
    """mis: tokens with w below this are masked too (0 = no lower bound)."""
    importance_level: Literal["token", "sequence"] = "token"
    """One weight per token, or per episode (the geometric mean of its tokens' ratios)."""
    kl_coef: float = 0.0
    """Weight of KL(policy || reference) in the loss; 0 = no reference model is loaded."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token KL estimate from sampled tokens in the loss: k3 (unbiased, >= 0, low
    variance) or k2 (½ log-ratio², the KL's gradient on-policy). k1 is refused as a loss:
    its expected gradient is zero."""
    # -- advantages ----------------------------------------------------------------------
    group_std_norm: bool = True
    """GRPO/DAPO: divide group-centred rewards by the group std (false = Dr. GRPO style)."""
    critic: Literal["value_head", "separate", "none"] = "none"
    """PPO's critic: value_head (a linear head on the policy trunk) or separate (a second
    model); none for the group-advantage algorithms."""
    gamma: float = 1.0
    """GAE discount."""
    lam: float = 1.0
    """GAE λ. 1.0 (verl's default for LLMs): with a fresh critic (value ≈ 0) a λ < 1 decays
    the terminal reward's advantage toward the first tokens of a long multi-turn episode,
    so the early decisions (which tool, what query) learn slowest; measured on the CPU demo:
    eval reward +0.04 with λ=0.95 vs +0.085 with λ=1 after 20 PPO steps."""
    value_clip: float = 0.2
    """PPO value clipping around the old values."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    whiten_advantages: bool = True
    """PPO: normalise advantages over the batch's generated tokens."""
    # -- DAPO extras ---------------------------------------------------------------------
    dynamic_sampling: bool = True
    """Drop groups whose task rewards are all equal (all right or all wrong: no answer
    signal, overlong shaping aside) and sample more until the batch is full."""
    max_sampling_rounds: int = 4
    """Extra sampling rounds dynamic sampling may take before training on what it has."""
    sampling_time_budget_s: float = 0.0
    """Dynamic sampling stops refilling a step once its sampling has taken this many
    seconds, and the step trains on the informative groups it holds (0 = no time limit;
    ``max_sampling_rounds`` still caps the rounds). ``sampling/groups_drawn`` and
    ``sampling/groups_kept`` say what the refill cost and bought."""
    overlong_buffer: int = 64
    """Soft overlong punishment window (tokens) before rollout.max_response_tokens; 0 = off.
    DAPO's preset: a quarter of max_response_tokens."""
    overlong_penalty: float = 1.0
    """The penalty at (and beyond) max_response_tokens; it ramps linearly over the buffer."""

    def __post_init__(self) -> None:
        check_fields(self, "algorithm.")
        if self.name == "ppo" and self.critic == "none":
            raise ConfigError("algorithm.name=ppo needs a critic: set algorithm.critic="
                              "value_head or separate")
        if self.name != "ppo" and self.critic != "none":
            raise ConfigError(f"algorithm.name={self.name} uses group advantages, not a critic: "
                              "set algorithm.critic=none")
        if self.name in ("grpo", "dapo") and self.group_size < 2:
            raise ConfigError(f"algorithm.name={self.name} compares samples of one prompt: set "
                              "algorithm.group_size >= 2")
        if self.dynamic_sampling and self.name == "ppo":
            raise ConfigError("algorithm.dynamic_sampling needs group advantages: use grpo/dapo "
                              "or set it to false")
        for name in ("clip_eps_low", "clip_eps_high"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ConfigError(f"algorithm.{name}={getattr(self, name)}: must be in (0, 1)")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ConfigError("algorithm.gamma and algorithm.lam must be in [0, 1]")
        if self.lr <= 0 or self.critic_lr <= 0:
            raise ConfigError("algorithm.lr and algorithm.critic_lr must be > 0")
        if self.clip_ratio_c and self.clip_ratio_c <= 1.0:
            raise ConfigError(f"algorithm.clip_ratio_c={self.clip_ratio_c}: the dual clip must be "
                              "> 1 (3 is usual), or 0 to turn it off")
        if self.kl_coef > 0 and self.kl_estimator == "k1":
            raise ConfigError("algorithm.kl_estimator=k1 has zero expected gradient as a loss "
                              "(E[∇ log π] = 0): use k3 (or k2) with algorithm.kl_coef > 0")
        if self.importance_correction in ("tis", "mis") and self.importance_cap <= 1.0:
            raise ConfigError(f"algorithm.importance_cap={self.importance_cap}: the cap of "
                              f"{self.importance_correction} must be > 1 (2 is usual)")
        if not 0.0 <= self.importance_floor < 1.0:
            raise ConfigError(f"algorithm.importance_floor={self.importance_floor} must be "
                              "in [0, 1)")
        if self.lr_warmup_steps > self.total_steps:
            raise ConfigError(f"algorithm.lr_warmup_steps={self.lr_warmup_steps} exceeds "
                              f"algorithm.total_steps={self.total_steps}")
        at_least(self, "algorithm.", 1, ("total_steps", "prompts_per_step", "group_size",
                                          "minibatch_size", "ppo_epochs"))
        at_least(self, "algorithm.", 0, ("kl_coef", "entropy_coef", "weight_decay",
                                          "max_sampling_rounds", "overlong_buffer",
                                          "overlong_penalty", "max_grad_norm",
                                          "critic_max_grad_norm", "clip_ratio_c",
                                          "lr_warmup_steps", "sampling_time_budget_s",
                                          "max_staleness", "importance_cap"))


@dataclass
class WarmStartSection:
    """A brief masked SFT on the env's oracle trajectories before RL
    (``trainers/rl/warmstart.py``), so a random policy has reward to climb."""

    episodes: int = 0
    """Oracle episodes to SFT on; 0 = no warm start."""
    strip_roles: bool = True
    """Keep only each oracle turn's tool call and answer (no think/plan prose)."""
    max_steps: int = 40
    """SFT optimiser steps."""
    learning_rate: float = 3e-3
    """SFT peak learning rate (cosine schedule)."""
    warmup_ratio: float = 0.05
    """Share of max_steps spent warming the learning rate up."""
    max_seq_len: int = 1024
    """Longest oracle trajectory (tokens) the SFT keeps whole."""
    precision: Literal["fp32", "bf16", "bf16_pure"] = "fp32"
    """SFT precision (bf16: autocast with fp32 master weights)."""

    def __post_init__(self) -> None:
        check_fields(self, "model.warm_start.")
        at_least(self, "model.warm_start.", 0, ("episodes",))
        at_least(self, "model.warm_start.", 1, ("max_steps", "max_seq_len"))
        if self.learning_rate <= 0:
            raise ConfigError("model.warm_start.learning_rate must be > 0")


@dataclass
class ModelSection(CommonModelSection):
    """The policy the learner trains and the rollout engines serve: the model section every
    trainer shares (``trainers/common/model.py``) plus the engines' dtype and the warm start.
    With ``lora.r > 0`` the optimiser, checkpoints and weight syncs hold the adapters only, the
    KL reference is the base with the adapter off, and ``final/`` is a peft adapter directory
    that ``coa eval``/``coa serve`` load with its base."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The rollout engines' weights, and the learner's compute dtype: the learner keeps fp32
    master weights and runs forward passes under autocast (fp16 with loss scaling)."""
    warm_start: WarmStartSection = field(default_factory=WarmStartSection)
    """SFT on oracle trajectories before RL (off unless warm_start.episodes > 0)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self, "model.")


@dataclass
class EnvSection:
    """The gymnasium env the episodes run in, or several mixed by weight (``envs``)."""

    id: str = "coa/SynthHop-v1"
    """A registered env id (``coa list``)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make`` (task_options, tools, reward, ...). Training
    plays the tasks of ``task_options.split`` (default ``train``)."""
    envs: list[MixtureEntry] = field(default_factory=list)
    """Several envs instead of ``id``/``kwargs``: ``[{id: coa/SynthHop-v1, weight: 0.5,
    env_kwargs: {...}}, {id: coa/NQ-v1, weight: 0.5}]``. Each prompt group's env is drawn by
    weight (seeded by step and group, so a resumed run draws the same); a group is always
    ``group_size`` samples of one task of one env. Metrics per env: ``rollout/<name>/...``
    and, with the periodic eval, ``eval/<name>/heldout_reward_mean`` on that env's held-out
    tasks; reward_curve.png draws a curve per env."""
    max_turns: int = 4
    """Model turns per episode before it is truncated."""
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    """Merged over ``kwargs`` (over each entry's ``env_kwargs`` with ``envs``) for the env of
    the periodic eval, which always plays the held-out tasks (``split: test``); e.g.
    ``{task_options: {num_tasks: 200}}``."""
    task_list: str | None = None
    """Train only on the tasks this JSONL lists (``coa filter-tasks`` output: the tasks the
    model neither always solves nor always fails); the periodic eval is not restricted.
    One env only (not with ``envs``)."""
    url: str | None = None
    """Step ``id`` in a ``coa serve-env`` server at this URL (``http://host:8100``) instead of
    in the rollout workers; ``kwargs`` go to it as client overrides (the server decides
    which it accepts). A bearer token, if the server wants one, comes from ``$COA_ENV_TOKEN``.
    One env only (not with ``envs``)."""

    def __post_init__(self) -> None:
        check_fields(self, "env.")
        at_least(self, "env.", 1, ("max_turns",))
        if self.url is not None and not self.url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ConfigError(f"env.url={self.url!r}: give the server's base URL, e.g. http://127.0.0.1:8100")
        if self.envs:
            if self.task_list or self.url:
                raise ConfigError("env.task_list and env.url name one env's tasks/server; with a mixture "
                                  "(env.envs) give each entry's tasks in its env_kwargs.task_options instead")
            self.envs = mixture_entries(self.envs, "env.envs")
            check_env_ids(self.envs, "env.envs")

    @property
    def mixture(self) -> list[MixtureEntry]:
        """The envs episodes run in: ``envs``, or ``id``/``kwargs`` as a mixture of one."""
        return list(self.envs) or [MixtureEntry(self.id, 1.0, dict(self.kwargs))]

    @property
    def label(self) -> str:
        """The env(s) in words, for titles: ``coa/SynthHop-v1`` or ``SynthHop-v1 + NQ-v1``."""
        return " + ".join(e.name for e in self.envs) if self.envs else self.id

    @property
    def train_split(self) -> str:
        """The task split training plays: ``task_options.split`` of ``kwargs`` (of every
        entry of ``envs``; one of them that differs is reported), default ``train``."""
        splits = [str(dict(e.env_kwargs.get("task_options") or {}).get("split", "train"))
                  for e in self.mixture]
        return next((split for split in splits if split != "train"), "train")


@dataclass
class RolloutSection:
    """How episodes are sampled."""

    engine: Literal["hf", "vllm"] = "hf"
    """Inference engine of the rollout workers (vllm needs a GPU and the vllm extra)."""
    max_new_tokens: int = 48
    """Tokens the policy may generate in one turn (stops earlier at a protocol stop string)."""
    max_response_tokens: int = 256
    """Generated + observation tokens per episode; the episode is truncated past it."""
    temperature: float = 1.0
    """Sampling temperature; the learner scores log-probs at the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold (1 = off)."""
    episodes_in_flight: int = 8
    """Episodes a rollout worker runs concurrently (tools run while others generate)."""
    tool_threads: int = 4
    """Threads per worker stepping envs (tool calls) while generation runs."""
    interrupt_generation: bool = True
    """Asynchronous RL (``algorithm.max_staleness >= 1``): new weights stop the generation
    round in flight, and its turns resume under them (partial rollouts: each token keeps
    the version and logprob it was sampled with). False: a turn finishes under the weights
    it started with, and the new ones load before the next round (between turns)."""
    max_episode_retries: int = 1
    """Times an episode lost to a crashed worker is re-run before it is dropped (counted)."""
    timeout_s: float = 600.0
    """Longest a worker's share of one batch may take before it counts as lost."""
    worker_restart_timeout_s: float = 120.0
    """How long a crashed rollout worker may take to come back (Ray restarts it: a new
    process that loads the env and the model) before its episodes are dropped."""
    agent: str | None = None
    """An external agent plays every episode instead of the built-in loop: ``module:function``
    or ``path/to/file.py:function``, a callable ``fn(task: AgentTask) -> answer`` that talks to
    the policy through a recording gateway (``trainers/rl/external.py``; e.g.
    ``examples/gateway_react_agent.py:react_agent``). Sampling settings above are forced on it."""
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments bound to ``agent`` (e.g. ``{max_steps: 4}``)."""
    agent_chat_template: str | None = None
    """The chat template the gateway renders the agent's requests with instead of the
    tokenizer's: a Jinja file or ``chatml-tools`` (ChatML with function calling, for a ChatML
    model such as SmolLM2 whose own template cannot render the tools an agent sends)."""

    def __post_init__(self) -> None:
        check_fields(self, "rollout.")
        if self.temperature <= 0:
            raise ConfigError("rollout.temperature must be > 0 (RL needs sampled, not greedy, "
                              "rollouts)")
        if not 0 < self.top_p <= 1:
            raise ConfigError("rollout.top_p must be in (0, 1]")
        at_least(self, "rollout.", 1, ("max_new_tokens", "max_response_tokens",
                                        "episodes_in_flight", "tool_threads"))
        at_least(self, "rollout.", 0, ("max_episode_retries",))
        if self.agent is not None and ":" not in self.agent:
            raise ConfigError(f"rollout.agent={self.agent!r}: name the agent callable as module:function or "
                              "path/to/file.py:function")

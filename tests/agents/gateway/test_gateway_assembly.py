"""Sessions -> trajectories on hand-made calls: which calls continue a segment, which start one
and why, and that nothing but the recorded ids ever reaches a segment."""

from __future__ import annotations

from agents.gateway.assembly import session_trajectories
from agents.gateway.sessions import GatewayCall, GatewaySession
from agents.trajectory import EpisodeStatus, Trajectory


class Decoder:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"<{i}>" for i in ids)


def _call(index, prompt, completion, messages=None, reply=None, text=None):
    return GatewayCall(index=index, source="engine", messages=messages or [{"role": "user", "content": "q"}],
                       tools=None, prompt_text="", prompt_ids=list(prompt),
                       completion_text=text if text is not None else Decoder().decode(completion),
                       completion_ids=list(completion), logprobs=[-0.5] * len(completion),
                       reply=reply or {"role": "assistant", "content": "r"}, finish_reason="stop")


def _session(*calls):
    session = GatewaySession("s", seed=7, sample_index=2, info={"group_id": 3})
    for call in calls:
        session.next_index()
        session.record(call)
    return session


def test_calls_that_extend_the_last_context_form_one_trajectory():
    session = _session(_call(0, [1, 2], [3, 4]), _call(1, [1, 2, 3, 4, 5, 6], [7]),
                       _call(2, [1, 2, 3, 4, 5, 6, 7], [8]))
    (trajectory,) = session_trajectories(session, Decoder())
    assert trajectory.prompt_ids == [1, 2]
    assert [(s.kind, s.token_ids) for s in trajectory.segments] == [
        ("generated", [3, 4]), ("observation", [5, 6]), ("generated", [7]), ("generated", [8])]
    assert trajectory.loss_mask() == [1, 1, 0, 0, 1, 1]
    assert trajectory.sampled_logprobs() == [-0.5, -0.5, 0.0, 0.0, -0.5, -0.5]
    assert trajectory.info["gateway"]["layout"] == "append_only"
    assert (trajectory.seed, trajectory.sample_index, trajectory.info["group_id"]) == (7, 2, 3)


def test_a_branch_a_rewrite_and_a_new_conversation_each_start_a_segment():
    session = _session(
        _call(0, [1, 2], [3]),
        _call(1, [1, 2, 3, 4], [5]),        # continues
        _call(2, [1, 2, 3, 9], [6]),        # back to the end of call 0's context: a branch (retry)
        _call(3, [1, 2, 8], [7]),           # leaves call 0's prompt+reply part-way: history rewritten
        _call(4, [20, 21], [22]),           # nothing in common: another conversation
        _call(5, [1, 2], [30]),             # call 0's prompt again: another sample of it (n=2, a retry)
    )
    trajectories = session_trajectories(session, Decoder())
    info = [t.info["gateway"] for t in trajectories]
    assert [i["calls"] for i in info] == [[0, 1], [2], [3], [4], [5]]
    assert [i["split_reason"] for i in info] == [None, "branch", "history_rewritten", "new_conversation", "branch"]
    assert [i["common_prefix"] for i in info] == [0, 3, 2, 0, 2]
    assert {i["layout"] for i in info} == {"split"}
    assert [t.prompt_ids for t in trajectories] == [[1, 2], [1, 2, 3, 9], [1, 2, 8], [20, 21], [1, 2]]
    # every sampled id is trained exactly once
    generated = sorted(i for t in trajectories for s in t.segments if s.kind == "generated" for i in s.token_ids)
    assert generated == [3, 5, 6, 7, 22, 30]


def test_the_outcome_goes_to_every_segment():
    session = _session(_call(0, [1], [2]), _call(1, [5], [6]))
    outcome = Trajectory(env_id="coa/X-v0", task_id="t", reward=0.75, answer="a", terminated=True,
                         status=EpisodeStatus.OK, tool_calls={"wiki_search": 2},
                         info={"reward_details": {"f1": 0.75}, "reward_source": "env"})
    trajectories = session_trajectories(session, Decoder(), outcome)
    assert [(t.reward, t.answer, t.tool_calls, t.info["reward_details"]) for t in trajectories] == [
        (0.75, "a", {"wiki_search": 2}, {"f1": 0.75})] * 2


def test_calls_without_ids_are_assembled_on_messages():
    first = [{"role": "user", "content": "q"}]
    reply = {"role": "assistant", "content": "thinking", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}]}
    second = [*first, {"role": "assistant", "content": [{"type": "text", "text": "thinking"}],
                       "tool_calls": [{"id": "c1", "type": "function",
                                       "function": {"name": "search", "arguments": '{"query":"x"}'}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "found"}]
    session = _session(_call(0, [], [], messages=first, reply=reply, text=""),
                       _call(1, [], [], messages=second, reply={"role": "assistant", "content": "done"}, text=""))
    (trajectory,) = session_trajectories(session)
    assert trajectory.info["gateway"]["tokens"] == "text_only" and not trajectory.has_token_ids
    texts = [(s.kind, s.text) for s in trajectory.segments]
    assert texts[0][0] == "generated" and '"name": "search"' in texts[0][1] and "<tool_call>" in texts[0][1]
    assert texts[1:] == [("observation", "\n[tool] found"), ("generated", "done")]


def test_a_session_without_calls_is_one_empty_record():
    (trajectory,) = session_trajectories(_session(), None, Trajectory(env_id="e", task_id="t",
                                                                      status=EpisodeStatus.ERROR_AGENT))
    assert trajectory.segments == [] and trajectory.status is EpisodeStatus.ERROR_AGENT
    assert trajectory.info["gateway"]["layout"] == "empty"

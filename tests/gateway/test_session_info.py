"""SessionInfo as a phone needs it: real titles only, firstPrompt, nothing empty listed,
changes announced with session_updated."""

from __future__ import annotations

from relaybus.shared.store.appendlog import AppendBatch, OutEvent
from relaybus.shared.wire import frames
from tests.support.gateway_client import WsClient
from tests.support.gateway_publish import Publisher, now_ms
from tests.support.gateway_server import RunningGateway


async def hash_only(pub: Publisher, sid: str, fields: dict[str, str]) -> None:
    """A session hash with no event (what a bookkeeping-only file leaves behind)."""
    batch = AppendBatch(sid, [], hash_updates={"id": sid, **fields}, activity_ms=now_ms())
    await pub._append(batch)


async def test_list_shows_real_titles_first_prompt_and_nothing_empty(
    gw: RunningGateway, pub: Publisher
) -> None:
    """A prompt stored as a title (old hashes) is firstPrompt; a title record's title stays;
    an ended session without a single event is not listed."""
    await pub.start_session("prompted")
    await pub.events("prompted", ["x"])
    await hash_only(pub, "prompted", {"title": "fix the bug", "titleRank": "1"})
    await pub.start_session("titled")
    await hash_only(pub, "titled", {"title": "Mine", "titleRank": "5", "firstPrompt": "do it"})
    await pub.start_session("hollow")
    await pub.end("hollow")
    await hash_only(pub, "summary-only", {"cwd": ""})
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello([])
        await c.send({"type": "list_sessions"})
        listed = {s["id"]: s for s in (await c.expect("sessions"))["sessions"]}
    assert set(listed) == {"prompted", "titled"}
    assert "title" not in listed["prompted"] and listed["prompted"]["firstPrompt"] == "fix the bug"
    assert (listed["titled"]["title"], listed["titled"]["firstPrompt"]) == ("Mine", "do it")


async def test_session_updated_reaches_every_client_with_a_seq_id(
    gw: RunningGateway, pub: Publisher
) -> None:
    """session_updated is a broadcast like session_started: v1 and subscribing clients get it."""
    await pub.start_session("s1")
    info = {"id": "s1", "cwd": "/work/proj", "title": "Named", "live": True}
    prefix = frames.session_updated("s1", info)
    async with (
        WsClient(gw.ws, token="full-token") as sub,
        WsClient(gw.ws, token="full-token") as v1,
    ):
        await sub.hello(["session_subscriptions"])
        await v1.send({"type": "list_sessions"})
        await v1.expect("sessions")
        done = await pub._append(AppendBatch("s1", [OutEvent(frames.SESSION_UPDATED, prefix)]))
        got = [await sub.expect("session_updated"), await v1.expect("session_updated")]
    for frame in got:
        assert frame == {
            "type": "session_updated",
            "sessionId": "s1",
            "session": info,
            "seqId": done.last_seq,
        }


async def test_goal_status_only_sessions_are_not_listed(gw: RunningGateway, pub: Publisher) -> None:
    """The collector's hasContent verdict decides for ended sessions: "0" is not listed."""
    await pub.start_session("goal-only")
    await pub.events("goal-only", ["goal set"])
    await pub.end("goal-only")
    await hash_only(pub, "goal-only", {"hasContent": "0"})
    await pub.start_session("worked")
    await pub.events("worked", ["hi"])
    await pub.end("worked")
    await hash_only(pub, "worked", {"hasContent": "1"})
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello([])
        await c.send({"type": "list_sessions"})
        listed = [s["id"] for s in (await c.expect("sessions"))["sessions"]]
    assert listed == ["worked"]

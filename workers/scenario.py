"""A short scenario that exercises every rule: what `make demo` publishes and the e2e test checks.

Sessions carry a run id so that repeated demos on one cluster never touch each other's history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Step:
    note: str  # what the step shows, for the demo's table
    expect: str  # the outcome the rules give
    key: bytes | None  # the Kafka key the connector uses
    value: bytes


def _confirmation(
    n: int, at: datetime, send_id: str, session_key: str, origin: dict, text: str | None,
    *, agent: str = "ops", route: dict | None = None, media: list | None = None,
    native: list | None = None, destination_agent_id: str | None = None,
) -> dict:
    record = {
        "schema": "delivery-confirmation/1",
        "send_id": send_id,
        "confirmed_at": (at + timedelta(seconds=n)).isoformat(),
        "agent_id": agent,
        "session_key": session_key,
        "route": route or {"channel": "telegram", "peer_kind": "direct", "peer_id": "0"},
        "origin": origin,
        "payload": {"text": text, "media": media or [], "native": native or []},
        "receipt": {"platform_message_ids": [f"m{n}"]},
    }
    if destination_agent_id:
        record["destination_agent_id"] = destination_agent_id
    return record


def steps(run: str, at: datetime) -> list[Step]:
    """The demo scenario for run id `run` (lowercase letters and digits), starting at `at`."""
    dm = f"agent:ops:telegram:direct:u{run}"  # a Telegram DM (per-channel-peer scope)
    group = f"agent:ops:slack:channel:c{run}"  # a Slack channel
    dm_route = {"channel": "telegram", "peer_kind": "direct", "peer_id": f"u{run}"}
    group_route = {"channel": "slack", "peer_kind": "channel", "peer_id": f"c{run}"}
    job = {"id": f"job-{run}", "name": "daily report", "run_id": "r1", "mode": "background"}
    in_chat_job = {"id": f"job2-{run}", "name": "standup nudge", "mode": "in_chat",
                   "session_key": dm}

    def c(n: int, send_id: str, key: str, origin: dict, text: str | None, **kw) -> bytes:
        record = _confirmation(n, at, f"{run}-{send_id}", key, origin, text, **kw)
        return json.dumps(record).encode()

    legacy = f" Agent:OPS:Telegram:DM:U{run}"
    no_time = json.loads(c(15, "s13", dm, {"kind": "message_tool"}, "x"))
    del no_time["confirmed_at"]

    report = c(1, "s1", dm, {"kind": "automation_result", "job": job}, "Report: 3 open tickets",
               route=dm_route)
    out = [
        Step("job result delivered to a DM", "written", dm.encode(), report),
        Step("connector retried the same send", "duplicate", dm.encode(), report),
        Step("same send_id, different text", "conflict", dm.encode(),
             c(2, "s1", dm, {"kind": "automation_result", "job": job}, "Report: 4 open tickets",
               route=dm_route)),
        Step("failure alert", "written", dm.encode(),
             c(3, "s2", dm, {"kind": "failure_alert", "job": job}, "daily report failed twice",
               route=dm_route)),
        Step("message-tool send to a channel", "written", group.encode(),
             c(4, "s3", group, {"kind": "message_tool"}, "Deploy finished", route=group_route)),
        Step("sub-agent announcement", "written", dm.encode(),
             c(5, "s4", dm, {"kind": "subagent_announcement",
                             "subagent": {"run_id": "sa1", "agent_id": "researcher",
                                          "label": "research"}},
               "Research done: 5 sources", route=dm_route)),
        Step("reply of a turn in the same chat", "skipped_same_turn", dm.encode(),
             c(6, "s5", dm, {"kind": "turn_reply", "turn": {"session_key": dm, "turn_id": "t1"}},
               "Sure, here it is", route=dm_route)),
        Step("reply of a turn in another chat", "written", group.encode(),
             c(7, "s6", group, {"kind": "turn_reply",
                                "turn": {"session_key": dm, "turn_id": "t2"}},
               "Posting the summary here as asked", route=group_route)),
        Step("destination bound to another agent", "other_agent", dm.encode(),
             c(8, "s7", dm, {"kind": "message_tool"}, "hello sales", route=dm_route,
               destination_agent_id="sales")),
        Step("native-only payload (embed)", "native_only", group.encode(),
             c(9, "s8", group, {"kind": "message_tool"}, None, route=group_route,
               native=[{"kind": "discord_embed", "title": "status"}])),
        Step("chat reset", "reset", dm.encode(), json.dumps({
            "schema": "session-reset/1", "session_key": dm,
            "reset_at": (at + timedelta(seconds=10)).isoformat(), "reason": "/new"}).encode()),
        Step("job result after the reset (new epoch)", "written", dm.encode(),
             c(11, "s9", dm, {"kind": "automation_result", "job": job}, "Report: all clear",
               route=dm_route)),
        Step("in-chat job delivering elsewhere", "written", group.encode(),
             c(12, "s10", group, {"kind": "automation_result", "job": in_chat_job},
               "Stand-up in 5 minutes", route=group_route)),
        Step("media-only send (URL not copied)", "written", dm.encode(),
             c(13, "s11", dm, {"kind": "message_tool"}, None, route=dm_route,
               media=[{"kind": "image", "name": "chart.png",
                       "url": "https://cdn.example/chart.png?token=SECRET"}])),
        Step("sender used a legacy, mixed-case key", "written", legacy.encode(),
             c(14, "s12", legacy, {"kind": "message_tool"}, "Reminder set", route=dm_route)),
        Step("not JSON", "dead_letter", dm.encode(), b"{not json"),
        Step("schema violation (no confirmed_at)", "dead_letter", dm.encode(),
             json.dumps(no_time).encode()),
    ]
    return out

"""The pure parts of the operating surface: dead-letter reason classes, histograms, the
Prometheus rendering, readiness and liveness decisions, the HTTP settings."""

from __future__ import annotations

import json
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from schemas import Invalid, parse_input
from workers.core import failed
from workers.ops import health as health_module
from workers.ops.health import Health
from workers.ops.http import bind
from workers.ops.metrics import (
    METRIC_NAMES,
    OUTCOMES,
    REASON_CLASSES,
    Histogram,
    Metrics,
    reason_class,
)
from workers.settings import SettingsError, worker_settings


def _reason(raw: bytes) -> str:
    parsed = parse_input(raw)
    assert isinstance(parsed, Invalid), parsed
    return parsed.reason


@pytest.mark.parametrize(("raw", "expected"), [
    (b"{" * 10, "not_json"),
    (b'{"a": NaN}', "not_json"),
    (b"[" * 5000 + b"]" * 5000, "not_json"),
    (b'{"schema": "nope.v9"}', "unknown_schema"),
    (b'{"schema": "delivery-confirmation/1"}', "invalid_field"),
    (b" " * (1024 * 1024 + 1), "oversize"),
])
def test_the_core_s_reasons_fall_in_their_class(raw, expected):
    assert reason_class(_reason(raw)) == expected


def test_other_reason_classes():
    assert reason_class(failed(RuntimeError("boom")).error) == "handling_failed"
    assert reason_class("stored state of the session is unreadable: x") == "unreadable_state"
    assert reason_class("session_key: a reset needs a full agent:<agent_id>:… key") \
        == "invalid_session_key"
    assert reason_class(None) == "invalid_field"
    assert {reason_class(r) for r in ("", "x", "text: y")} <= set(REASON_CLASSES)


def test_histogram_buckets_are_cumulative_with_le_semantics():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(v)
    h.observe_many([0.2, 30.0])
    family = h.family("x_seconds", "doc")
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 2, "1.0": 5, "+Inf": 7}
    assert [s.value for s in family.samples if s.name.endswith("_sum")] == \
        [pytest.approx(0.05 + 0.1 + 0.5 + 1.0 + 7.0 + 0.2 + 30.0)]


def _families(metrics: Metrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def test_rendering_names_every_metric_and_counts_committed_batches():
    m = Metrics()
    m.committed({"written": 3, "dead_letter": 2}, 5, 0.0,
                ["not JSON: x", "handling failed: E: y"], [0.0, 0.0, 0.0])
    m.gauges.lag = {0: 4, 3: 0}
    m.gauges.state = {0: (10, 2048)}
    m.transactions = lambda: {"committed": 7, "aborted": 1}
    m.positions = lambda: {0: (3, 1.5), 3: (0, 0.2)}
    m.standbys = lambda: {5: 12, 1: 0}
    families = _families(m)
    assert {s.labels["partition"]: s.value
            for s in families["transcript_owner_standby_lag"].samples} == {"1": 0, "5": 12}
    # the parser drops _total from counter family names; METRIC_NAMES has the sample names
    exposed = {s.name for f in families.values() for s in f.samples}
    for name in METRIC_NAMES:
        assert any(e == name or e.startswith(name + "_") for e in exposed), name
    records = {s.labels["outcome"]: s.value
               for s in families["transcript_owner_records"].samples
               if s.name == "transcript_owner_records_total"}
    assert set(records) == set(OUTCOMES)
    assert records["written"] == 3 and records["dead_letter"] == 2 and records["reset"] == 0
    dead = {s.labels["reason"]: s.value for s in families["transcript_owner_dead_letters"].samples
            if s.name.endswith("_total")}
    assert dead["not_json"] == 1 and dead["handling_failed"] == 1 and sum(dead.values()) == 2
    lag = {s.labels["partition"]: s.value
           for s in families["transcript_owner_consumer_lag"].samples}
    assert lag == {"0": 4, "3": 0}
    txns = {s.labels["result"]: s.value
            for s in families["transcript_owner_transactions"].samples
            if s.name.endswith("_total")}
    assert txns == {"committed": 7, "aborted": 1}
    latency = [s for s in families["transcript_owner_end_to_end_latency_seconds"].samples
               if s.name.endswith("_count")]
    assert latency[0].value == 3


def test_outcome_totals_are_replaced_not_added():
    """`committed` gets the running totals (Owner.counts), so a second batch does not double."""
    m = Metrics()
    m.committed({"written": 3}, 3, 0.0, [], [])
    m.committed({"written": 5}, 2, 0.0, [], [])
    assert m.records["written"] == 5


class _App:
    should_stop = False
    rebalancing = False
    consumer_generation_id = 4


def test_readiness_follows_the_rebalance_phases():
    from workers.core.lifecycle import Assigned, Checked, Restored, Revoked, Settled

    h = Health(liveness_timeout_s=10, settles=True)
    app = _App()
    h._app = app
    assert h.readiness() == (False, "waiting for the group to assign partitions")
    for event, phase in ((Assigned(4), "settling"), (Settled(), "restoring"),
                         (Restored(), "checking")):
        h.send(event)
        assert (h.phase, h.readiness()[0]) == (phase, False)
        assert h.restoring is (phase in ("settling", "restoring"))
    h.send(Checked(4))
    assert h.readiness() == (True, "processing")
    app.consumer_generation_id = 5  # a new generation the recovery has not completed
    assert h.readiness()[0] is False
    app.consumer_generation_id = 4
    h.send(Revoked())
    assert h.readiness() == (False, "rebalancing: partitions revoked, waiting for the new "
                                    "assignment")
    app.should_stop = True
    assert h.readiness() == (False, "stopping")
    h.send(Assigned(6))  # stopping is terminal
    assert h.phase == "stopping"


def test_liveness_fails_only_for_a_batch_in_flight_too_long(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(health_module.time, "monotonic", lambda: clock[0])
    h = Health(liveness_timeout_s=30)
    assert h.liveness()[0] is True
    h.batch_started()
    clock[0] += 29
    assert h.liveness()[0] is True
    clock[0] += 2
    ok, reason = h.liveness()
    assert ok is False and "31s" in reason and "TRANSCRIPT_LIVENESS_TIMEOUT_S" in reason
    h.batch_done()
    assert h.liveness()[0] is True


@pytest.mark.parametrize(("var", "value"), [
    ("TRANSCRIPT_HTTP_PORT", "65536"), ("TRANSCRIPT_HTTP_PORT", "-1"),
    ("TRANSCRIPT_HTTP_PORT", "http"), ("TRANSCRIPT_HTTP_HOST", "a b"),
    ("TRANSCRIPT_HTTP_HOST", "x" * 300), ("TRANSCRIPT_LIVENESS_TIMEOUT_S", "0"),
    ("TRANSCRIPT_LIVENESS_TIMEOUT_S", "inf"),
])
def test_http_settings_are_validated_naming_the_variable(var, value):
    with pytest.raises(SettingsError, match=var):
        worker_settings({var: value})


def test_no_port_no_server_and_defaults():
    ws = worker_settings({})
    assert ws.http_port is None and ws.http_host == "127.0.0.1"
    assert worker_settings({"TRANSCRIPT_HTTP_PORT": "0"}).http_port == 0


def test_a_port_in_use_is_an_error_naming_the_settings():
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"127.0.0.1:{port}.*TRANSCRIPT_HTTP_PORT"):
            bind("127.0.0.1", port)
    finally:
        taken.close()
    sock = bind("127.0.0.1", 0)
    assert sock.getsockname()[1] > 0
    sock.close()


def test_json_bodies_are_json():
    from workers.ops.http import _json

    response = _json(503, {"ready": False, "reason": "r"})
    assert response.status == 503 and json.loads(response.text) == {"ready": False, "reason": "r"}

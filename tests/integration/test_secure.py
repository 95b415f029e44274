"""The secured local broker (`make kafka-up-secure`: SASL_SSL, SCRAM-SHA-512, the
StandardAuthorizer, no access without an ACL): topics.yaml's ACLs applied and checked, the
exactly-once worker end to end as its own principal, and what is refused, and how.

Each test has its own TRANSCRIPT_TOPIC_PREFIX (`prefix`), so its topics and ACL bindings are its
own; both are removed after it. The broker and its env files are shared by the session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import TopicAuthorizationFailedError

from tests.conftest import ROOT, cli
from tests.integration.harness import (
    Collector,
    WorkerProcess,
    entry_records,
    poll_until,
    replay_entries,
    without_written_at,
)
from workers.core.outputs import CONFIRMATIONS, CONTROL, DLQ, ENTRIES, ERASURES
from workers.kafka_io import producer, publish, read
from workers.scenario import steps
from workers.settings import kafka_settings
from workers.topics import load_acls, load_topics

pytestmark = pytest.mark.kafka

SECURE_DIR = Path(os.environ.get("KAFKA_SECURE_DATA_DIR", ROOT / "var/kafka/secure"))
USERS = ("admin", "worker", "connector", "operator", "reader")
ENV_KEYS = {"KAFKA_BOOTSTRAP", "KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM",
            "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "KAFKA_SSL_CAFILE"}
N_BINDINGS = len(load_acls(ROOT / "topics.yaml").bindings)
TOPIC_NAMES = [t.name for t in load_topics(ROOT / "topics.yaml")]  # unprefixed
N_TOPICS = len(TOPIC_NAMES)


def read_env_file(path: Path) -> dict[str, str]:
    pairs = [line.split("=", 1) for line in path.read_text().splitlines()
             if line and not line.startswith("#")]
    return {k: v for k, v in pairs}


@pytest.fixture(scope="session")
def secure() -> dict[str, dict[str, str]]:
    """The secured broker, started if it is not up; each principal's env file."""
    done = subprocess.run([str(ROOT / "deploy/local/kafka-up-secure.sh")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"kafka-up-secure failed:\n{done.stdout}\n{done.stderr}"
    envs = {u: read_env_file(SECURE_DIR / f"{u}.env") for u in USERS}
    for user, e in envs.items():
        assert set(e) == ENV_KEYS and e["KAFKA_SASL_USERNAME"] == user
        assert all(h.rsplit(":", 1)[0] == "127.0.0.1" for h in e["KAFKA_BOOTSTRAP"].split(","))
    return envs


@pytest.fixture
def as_user(secure, prefix):
    """as_user(name, **extra) -> environment of a `transcript-owner` subprocess connecting as
    that principal to this test's topics; nothing inherited that points elsewhere."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "TRANSCRIPT_"))}

    def make(user: str, **extra: str) -> dict[str, str]:
        return {**base, **secure[user], "TRANSCRIPT_TOPIC_PREFIX": prefix,
                "PYTHONUNBUFFERED": "1", **extra}

    return make


@pytest.fixture
def admin(secure):
    client = KafkaAdminClient(**kafka_settings(secure["admin"]).kafka_python_kwargs(),
                              request_timeout_ms=20000)
    yield client
    client.close()


@pytest.fixture
def cleanup(admin, prefix):
    """After the test: its topics and every ACL binding on its resources go."""
    yield
    resources = load_acls(ROOT / "topics.yaml", prefix).resources
    kinds = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
             "transactional_id": ResourceType.TRANSACTIONAL_ID}
    admin.delete_acls([
        ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                  permission_type=ACLPermissionType.ANY,
                  resource_pattern=ResourcePatternFilter(
                      kinds[kind], name, getattr(ACLResourcePatternType, pattern.upper())))
        for kind, name, pattern in resources if kind in kinds])
    mine = [t for t in admin.list_topics() if t.startswith(prefix)]
    if mine:
        admin.delete_topics(mine)


@pytest.fixture
def applied(as_user, cleanup):
    """This test's topics and ACLs, applied as admin."""
    done = cli("topics", "apply", env=as_user("admin"))
    assert done.returncode == 0, done.stderr.decode()


def acls_on(admin, prefix: str) -> set[tuple[str, str, str, str, str]]:
    """(principal, resource type, name, pattern, operation) of the bindings on the test's
    resources, as the cluster has them."""
    found = set()
    for kind, name, _ in load_acls(ROOT / "topics.yaml", prefix).resources:
        rtype = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
                 "transactional_id": ResourceType.TRANSACTIONAL_ID}[kind]
        bindings, _ = admin.describe_acls(ACLFilter(
            principal=None, host=None, operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(rtype, name, ACLResourcePatternType.MATCH)))
        found |= {(b.principal, b.resource_pattern.resource_type.name,
                   b.resource_pattern.resource_name, b.resource_pattern.pattern_type.name,
                   b.operation.name) for b in bindings}
    return found


def reader_acl(prefix: str, principal: str = "User:reader") -> ACL:
    return ACL(principal=principal, host="*", operation=ACLOperation.READ,
               permission_type=ACLPermissionType.ALLOW,
               resource_pattern=ResourcePattern(ResourceType.TOPIC, prefix + ENTRIES,
                                                ACLResourcePatternType.LITERAL))


def test_kafka_up_secure_is_idempotent_and_its_env_files_are_private(secure):
    done = subprocess.run([str(ROOT / "deploy/local/kafka-up-secure.sh")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "already up" in done.stdout and "authenticated as admin" in done.stdout
    assert done.stdout.rstrip().endswith(f"bootstrap: {secure['admin']['KAFKA_BOOTSTRAP']}")
    passwords = {e["KAFKA_SASL_PASSWORD"] for e in secure.values()}
    assert len(passwords) == len(USERS)  # one each, none shared
    assert not any(p in done.stdout + done.stderr for p in passwords)
    for user in USERS:
        assert (SECURE_DIR / f"{user}.env").stat().st_mode & 0o777 == 0o600
    cafile = Path(secure["admin"]["KAFKA_SSL_CAFILE"])
    assert cafile.read_text().startswith("-----BEGIN CERTIFICATE-----")


def _api_versions(port: int, cafile: str) -> bytes:
    """An ApiVersions v0 request over TLS, trusting the local CA, with no client certificate;
    the first 4 bytes of the answer (b"" if the broker closed the connection)."""
    context = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        request = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
        conn.sendall(struct.pack(">i", len(request)) + request)
        return conn.recv(4)


def test_the_inter_broker_and_controller_listeners_want_the_brokers_certificate(secure):
    client, controller, internal = map(int, (SECURE_DIR / "kafka.ports").read_text().split())
    cafile = secure["admin"]["KAFKA_SSL_CAFILE"]
    assert len(_api_versions(client, cafile)) == 4  # the client listener answers this request
    for port in (controller, internal):
        with pytest.raises(ssl.SSLError, match="CERTIFICATE"):
            _api_versions(port, cafile)


def test_apply_creates_topics_and_acls_and_check_reports_acl_drift(as_user, admin, prefix,
                                                                   cleanup):
    env = as_user("admin")
    before = cli("topics", "check", env=env)
    assert before.returncode == 1
    assert before.stdout.decode().count("absent") == N_TOPICS + N_BINDINGS  # topics, then bindings

    first = cli("topics", "apply", env=env)
    assert first.returncode == 0, first.stderr.decode()
    out = first.stdout.decode()
    assert out.count("created ") == N_TOPICS and out.count("allowed ") == N_BINDINGS
    assert f"allowed User:worker Write on transactional-id {prefix}transcript-owner-*" in out
    assert {t for t in admin.list_topics() if t.startswith(prefix)} == {
        prefix + n for n in TOPIC_NAMES}
    assert {CONFIRMATIONS, ENTRIES, "transcript.erasures"} <= set(TOPIC_NAMES)
    have = acls_on(admin, prefix)
    assert len(have) == N_BINDINGS
    assert ("User:worker", "TRANSACTIONAL_ID", f"{prefix}transcript-owner-", "PREFIXED",
            "WRITE") in have
    assert ("User:reader", "TOPIC", prefix + ENTRIES, "LITERAL", "READ") in have
    assert not any(p == "User:connector" and n == prefix + ENTRIES for p, _, n, _, _ in have)

    clean = cli("topics", "check", env=env)
    assert clean.returncode == 0, clean.stdout.decode()
    assert clean.stdout.decode().startswith(
        f"no drift: {N_TOPICS} topics and {N_BINDINGS} ACL bindings match topics.yaml")
    again = cli("topics", "apply", env=env)
    assert again.returncode == 0 and again.stdout.decode().startswith("nothing to change")

    # drift: the reader's Read removed, the connector given Read on the entries
    (_, removed, _), = admin.delete_acls([reader_acl(prefix)])
    assert len(removed) == 1
    assert not admin.create_acls([reader_acl(prefix, "User:connector")])["failed"]
    gone = ("User:reader", "TOPIC", prefix + ENTRIES, "LITERAL", "READ")
    stray = ("User:connector", "TOPIC", prefix + ENTRIES, "LITERAL", "READ")
    poll_until(lambda: gone not in (now := acls_on(admin, prefix)) and stray in now, 30, [],
               "the broker's authorizer shows both changes")  # it applies them a moment later
    drift = cli("topics", "check", env=env)
    assert drift.returncode == 1
    rows = [r.split() for r in drift.stdout.decode().splitlines()[2:]]
    assert rows == [
        ["topic", prefix + ENTRIES, "User:reader", "Read", "allow", "absent"],
        ["topic", prefix + ENTRIES, "User:connector", "Read", "(none)", "allow"],
    ]

    # apply restores what is declared and leaves the extra binding, saying so
    fix = cli("topics", "apply", env=env)
    assert fix.returncode == 0, fix.stderr.decode()
    lines = fix.stdout.decode().splitlines()
    assert f"allowed User:reader Read on topic {prefix}{ENTRIES}" in lines
    assert any(line.startswith(f"left allow User:connector Read on topic {prefix}{ENTRIES}: "
                               "not in topics.yaml") for line in lines)
    assert stray in (now := acls_on(admin, prefix)) and gone in now  # apply waited for it
    still = cli("topics", "check", env=env)
    assert still.returncode == 1
    assert [r.split() for r in still.stdout.decode().splitlines()[2:]] == [
        ["topic", prefix + ENTRIES, "User:connector", "Read", "(none)", "allow"]]


def test_the_exactly_once_worker_end_to_end_as_its_own_principal(as_user, secure, applied,
                                                                 tmp_path):
    """A connector publishes, the worker (principal worker, transactions) decides, a reader
    reads the entries read_committed: each with only the ACLs of topics.yaml."""
    connector = kafka_settings(as_user("connector"))
    reader = kafka_settings(as_user("reader"))
    scenario = steps("sec1", datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    publish(connector, connector.topic(CONFIRMATIONS), [(s.key, s.value) for s in scenario], 8)
    n_written = sum(s.expect == "written" for s in scenario)

    w = WorkerProcess(as_user("worker"), tmp_path / "state", tmp_path / "worker.log").start()
    entries = Collector(reader, reader.topic(ENTRIES))  # read_committed
    try:
        entries.wait_for(lambda r: len(r) >= n_written, 120, w)
        assert w.stop() == 0, w.tail()
    finally:
        entries.close()
        if w.alive():
            w.kill()
    # the whole topic once the worker is gone, read_committed by the reader: each entry once
    got = sorted((json.loads(r.value) for r in entry_records(reader)),
                 key=lambda e: (e["session_key"], e["seq"]))
    expected = sorted(replay_entries([s.value for s in scenario], as_user("worker")),
                      key=lambda e: (e["session_key"], e["seq"]))
    assert without_written_at(got) == without_written_at(expected)
    assert len(got) == n_written
    log = w.log.read_text(errors="replace")
    # the exactly-once path: the takeover (its transactional producer started) ran
    assert "last owners' transactions ended" in log
    assert "AuthorizationFailed" not in log and "not authorized" not in log.lower()
    assert secure["worker"]["KAFKA_SASL_PASSWORD"] not in log

    # its local state gone, the next start restores it from the changelog as the same
    # principal, over the same SASL_SSL settings (the restore's reader is aiokafka's)
    shutil.rmtree(tmp_path / "state")
    again = WorkerProcess(as_user("worker"), tmp_path / "state", tmp_path / "again.log").start()
    try:
        poll_until(lambda: "changelog records applied" in again.log.read_text(errors="replace"),
                   120, [again], "the restore's log line")
        assert again.stop() == 0, again.tail()
    finally:
        if again.alive():
            again.kill()
    log = again.log.read_text(errors="replace")
    applied_n = [int(n) for n in re.findall(r"(\d+) changelog records applied", log)]
    assert applied_n and applied_n[0] > 0, log[-3000:]
    assert "AuthorizationFailed" not in log and "not authorized" not in log.lower()
    assert secure["worker"]["KAFKA_SASL_PASSWORD"] not in log


def test_a_wrong_password_is_named_and_never_printed(as_user, secure, applied):
    wrong = f"wrong-{uuid.uuid4().hex}"
    real = secure["worker"]["KAFKA_SASL_PASSWORD"]
    env = as_user("worker", KAFKA_SASL_PASSWORD=wrong)
    for command in (["topics", "check"], ["worker"]):
        began = time.monotonic()
        done = cli(*command, env=env, timeout=90)
        out = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 2, (command, out)
        assert time.monotonic() - began < 20, "the refusal is reported at once, not retried"
        err = done.stderr.decode()
        assert err.startswith("error: authentication failed: Kafka at 127.0.0.1:"), err
        assert "KAFKA_SASL_USERNAME='worker'" in err and "SCRAM-SHA-512" in err
        assert "SaslAuthenticationFailed" in err
        assert wrong not in out and real not in out


def test_a_connector_cannot_read_the_entries_and_a_reader_cannot_write_them(as_user, admin,
                                                                            prefix, applied):
    topic = prefix + ENTRIES
    part0 = TopicPartition(topic, 0)
    admin_ks = kafka_settings(as_user("admin"))
    by_admin = producer(admin_ks)  # a super user writes one record to partition 0
    by_admin.send(topic, key=b"agent:a:main#0000000001", value=b"{}", partition=0).get(30)
    by_admin.close()
    connector, reader = kafka_settings(as_user("connector")), kafka_settings(as_user("reader"))

    # the reader reads it; the connector gets an authorization error and no record
    readers = [KafkaConsumer(**ks.kafka_python_kwargs(), isolation_level="read_committed",
                             enable_auto_commit=False, request_timeout_ms=10000)
               for ks in (reader, connector)]
    try:
        ok, refused = readers
        assert ok.end_offsets([part0]) == {part0: 1}
        with pytest.raises(TopicAuthorizationFailedError):
            refused.end_offsets([part0])
        assert refused.partitions_for_topic(topic) in (None, set())  # not even visible
        refused.assign([part0])
        refused.seek(part0, 0)
        deadline = time.monotonic() + 2  # what it would fetch in that time: nothing
        while time.monotonic() < deadline:
            assert refused.poll(timeout_ms=500) == {}
    finally:
        for c in readers:
            c.close()

    # the connector writes its own topic; the reader may not write the entries
    publish(connector, prefix + CONFIRMATIONS, [(b"agent:a:main", b"{}")])
    writer = KafkaProducer(**reader.kafka_python_kwargs(), enable_idempotence=False,
                             max_block_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            writer.send(topic, key=b"agent:a:main#0000000002", value=b"{}",
                          partition=0).get(timeout=20)
    finally:
        writer.close()
    check = KafkaConsumer(**admin_ks.kafka_python_kwargs(), isolation_level="read_committed")
    try:
        assert check.end_offsets([part0]) == {part0: 1}  # nothing was written
    finally:
        check.close()


def test_a_reader_reads_bound_to_a_position_and_no_connector_or_reader_can_forge_one(
        as_user, secure, applied, prefix, tmp_path):
    """DESIGN 1.3 on the secured broker: the reader principal, with topics.yaml's ACLs only
    (Describe on the input, Read on entries and the layout), reads a session bound to a
    connector's delivery and to latest; neither the connector nor the reader may write
    transcript.entries, so neither can forge an entry or a position record there."""
    import asyncio

    from transcript_connector import build_confirmation
    from transcript_connector.entries_topic import position_key, position_value
    from transcript_connector.publisher import ConfirmationPublisher, publisher_options_from_env
    from transcript_connector.reader import LATEST, BlockingSessionReader, reader_options_from_env

    key = "agent:ops:telegram:direct:bound"
    record = build_confirmation(
        send_id="bound-1", confirmed_at="2026-05-01T12:00:00Z", agent_id="ops", session_key=key,
        route={"channel": "telegram", "peer_kind": "direct", "peer_id": "bound"},
        origin={"kind": "message_tool"}, payload={"text": "hello"},
        receipt={"platform_message_ids": ["1"]})

    async def publish():  # noqa: ANN202
        async with ConfirmationPublisher(publisher_options_from_env(as_user("connector"))) as p:
            return await p.publish(record)

    w = WorkerProcess(as_user("worker"), tmp_path / "state", tmp_path / "worker.log").start()
    try:
        delivery = asyncio.run(publish())
        with BlockingSessionReader(reader_options_from_env(as_user("reader"))) as reader:
            for at in (delivery, LATEST):
                read = reader.read(key, at=at, timeout_s=120)
                assert [e.entry.send_id for e in read.entries] == ["bound-1"], at
                assert read.position.input_offset > delivery.offset
        assert w.stop() == 0, w.tail()
    finally:
        if w.alive():
            w.kill()
    topic = prefix + ENTRIES
    forged = position_value(0, 10**9, 0, datetime.now(UTC))
    for user in ("connector", "reader"):
        writer = KafkaProducer(**kafka_settings(as_user(user)).kafka_python_kwargs(),
                               enable_idempotence=False, max_block_ms=10000)
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                writer.send(topic, key=position_key(0), value=forged, partition=0).get(timeout=20)
        finally:
            writer.close()
    positions = [r for r in read_all_entries(as_user("admin")) if r.key == position_key(0)]
    assert positions and all(b'"input_offset":1000000000' not in r.value for r in positions)


def read_all_entries(env: dict[str, str]) -> list:
    from workers.kafka_io import read

    ks = kafka_settings(env)
    return list(read(ks, ks.topic(ENTRIES)))


def test_only_the_operator_erases(as_user, secure, applied, prefix, tmp_path):
    """Erasure is the operator's (DESIGN 1.2): the connector may not write transcript.control,
    `forget` with its credentials exits 2, and an erase it publishes to the input is a dead
    letter; `forget` as the operator erases through the worker, and the audit is clean."""
    from transcript_connector.partitioning import partition_for

    connector, operator = kafka_settings(as_user("connector")), kafka_settings(as_user("operator"))
    victim = "agent:ops:telegram:direct:sec-erase"
    t0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    history = [(victim.encode(), json.dumps({
        "schema": "delivery-confirmation/1", "send_id": f"e{i}",
        "confirmed_at": t0.replace(minute=i).isoformat(), "agent_id": "ops",
        "session_key": victim, "route": {"channel": "telegram", "peer_kind": "direct",
                                         "peer_id": "sec-erase"},
        "origin": {"kind": "message_tool"}, "payload": {"text": f"text {i}"},
        "receipt": {"platform_message_ids": [str(i)]}}).encode()) for i in range(1, 3)]
    forged = json.dumps({"schema": "session-erase/1", "session_key": victim,
                         "erased_at": t0.isoformat(), "reason": "forged"}).encode()
    publish(connector, connector.topic(CONFIRMATIONS), [*history, (victim.encode(), forged)], 8)

    # the connector: refused on transcript.control, by the broker and through forget
    control = connector.topic(CONTROL)
    writer = KafkaProducer(**connector.kafka_python_kwargs(), max_block_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            writer.send(control, key=victim.encode(), value=forged,
                        partition=partition_for(victim, 8)).get(timeout=20)
    finally:
        writer.close()

    w = WorkerProcess(as_user("worker"), tmp_path / "state", tmp_path / "worker.log").start()
    admin_env = as_user("admin")
    try:
        entries = Collector(operator, operator.topic(ENTRIES))
        entries.wait_for(lambda r: len([x for x in r if x.value is not None]) >= 2, 120, w)
        entries.close()
        dlq = Collector(kafka_settings(admin_env), prefix + DLQ)
        [dead] = dlq.wait_for(lambda r: len(r) >= 1, 60, w)
        dlq.close()
        assert b"accepted only on transcript.control" in dict(dead.headers)["error"]

        refused = cli("forget", victim, "--reason", "by the connector", "--force",
                      env=as_user("connector"))
        assert refused.returncode == 2, refused.stdout.decode() + refused.stderr.decode()
        assert b"Authorization" in refused.stderr
        assert b"Traceback" not in refused.stderr

        done = cli("forget", victim, "--reason", "ticket-1", "--wait", "90",
                   env=as_user("operator"))
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode() + w.tail()
        assert b"seq 1..2 tombstoned" in done.stdout
        audit = cli("audit", "--strict", "--json", env=admin_env)
        assert audit.returncode == 0, audit.stdout.decode()
        report = json.loads(audit.stdout)
        assert report["outcomes"]["erased"] == 1 and report["outcomes"]["forwarded"] == 1
        assert report["outcomes"]["dead_letter"] == 1
        assert w.stop() == 0, w.tail()
    finally:
        if w.alive():
            w.kill()
    erasures = [json.loads(r.value) for r in read(operator, operator.topic(ERASURES))]
    assert [(e["session_key"], e["reason"], e["through_seq"]) for e in erasures] == [
        (victim, "ticket-1", 2)]


@pytest.mark.parametrize("command", [["topics", "check"], ["worker"]])
def test_a_cafile_that_does_not_exist_is_refused_at_start(as_user, tmp_path, command):
    missing = tmp_path / "no-such-ca.pem"
    done = cli(*command, env=as_user("worker", KAFKA_SSL_CAFILE=str(missing)), timeout=60)
    assert done.returncode == 2
    assert done.stderr.decode().startswith(f"error: KAFKA_SSL_CAFILE: {missing} does not exist")
    assert done.stdout.decode() == ""

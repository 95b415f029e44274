"""The Python connector on the secured broker (`make kafka-up-secure`), as a gateway runs it:
its own virtualenv (TRANSCRIPT_CONNECTOR_PYTHON, as tests/integration/test_python_connector.py),
the worktree's connector sources and nothing of the worker's, the `connector` principal's env
file as its environment (SASL_SSL, SCRAM-SHA-512, KAFKA_SSL_CAFILE), the ACLs of topics.yaml
applied under the test's prefix (test_secure.py's fixtures). The subprocess is
connectors/python/tests/e2e/secure_publish.py.

- transactions over SASL_SSL, committed and aborted, decided by the worker (principal worker,
  exactly once) and read by the reader: the committed records' entries, the aborted never;
- what the trust boundary (DESIGN 1.2) refuses it, and how: transcript.control (no ACL),
  a wrong password, a CA that did not sign the broker's certificate, and a transactional id
  (topics.yaml grants the connector none).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
)

from tests.conftest import ROOT
from tests.integration import test_secure
from tests.integration.harness import (
    Collector,
    WorkerProcess,
    poll_until,
    replay_entries,
    without_written_at,
)
from tests.integration.test_python_connector import connector_python
from workers.core.outputs import CONFIRMATIONS, CONTROL, ENTRIES
from workers.kafka_io import end_offsets, read
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

# test_secure.py's fixtures: the secured broker and env files, principals' environments, the
# test's topics and ACLs applied as admin (and removed after)
secure, as_user, admin = test_secure.secure, test_secure.as_user, test_secure.admin
cleanup, applied = test_secure.cleanup, test_secure.applied

SCRIPT = ROOT / "connectors/python/tests/e2e/secure_publish.py"
REFUSED = 3  # secure_publish.py: the connector raised ConnectorError, printed on stderr


def run_connector(env: dict[str, str], mode: str, cwd: Path, **extra: str):
    """secure_publish.py MODE with the connector's interpreter; the worktree's connector
    sources first on its path (the virtualenv's editable install may be another checkout's),
    no worker source on it."""
    done = subprocess.run(
        [str(connector_python()), str(SCRIPT), mode], cwd=cwd, capture_output=True,
        text=True, timeout=120,
        env={**env, "PYTHONPATH": str(ROOT / "connectors/python/src"), **extra})
    return done


def result(done) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["module"] == str(ROOT / "connectors/python/src/transcript_connector/__init__.py")
    return out


def refusal(done, *secrets: str) -> str:
    """The connector's refusal: exit 3, one `refused: …` line and no traceback; none of
    `secrets` anywhere in its output."""
    out = done.stdout + done.stderr
    assert done.returncode == REFUSED, out
    assert done.stdout == "" and "Traceback" not in out, out
    lines = [line for line in done.stderr.splitlines() if line.startswith("refused: ")]
    assert len(lines) == 1, out
    assert not any(s in out for s in secrets), "a password in the connector's output"
    return lines[0]


def nothing_in(ks, topic: str) -> bool:
    return sum(end_offsets(ks, topic).values()) == 0


@pytest.fixture
def connector_txn_ids(admin, prefix, applied):
    """Not in topics.yaml (it grants the connector no transactional id): Write+Describe for
    User:connector on the transactional ids `<prefix>connector-*`, removed after the test.
    Yields the prefix of the ids the connector may use."""
    granted = f"{prefix}connector-"
    acls = [ACL(principal="User:connector", host="*", operation=op,
                permission_type=ACLPermissionType.ALLOW,
                resource_pattern=ResourcePattern(ResourceType.TRANSACTIONAL_ID, granted,
                                                 ACLResourcePatternType.PREFIXED))
            for op in (ACLOperation.WRITE, ACLOperation.DESCRIBE)]
    assert not admin.create_acls(acls)["failed"]
    pattern = ResourcePattern(ResourceType.TRANSACTIONAL_ID, granted,
                              ACLResourcePatternType.PREFIXED)

    def visible() -> bool:
        bindings, _ = admin.describe_acls(ACLFilter(
            principal="User:connector", host=None, operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY, resource_pattern=pattern))
        return len(bindings) == 2

    poll_until(visible, 30, [], "the broker's authorizer shows the connector's grant")
    yield granted
    admin.delete_acls([ACLFilter(principal="User:connector", host=None,
                                 operation=ACLOperation.ANY,
                                 permission_type=ACLPermissionType.ANY,
                                 resource_pattern=pattern)])


def test_connector_transactions_over_sasl_ssl_decided_by_the_worker(
        as_user, secure, connector_txn_ids, tmp_path):
    """Committed [1, 2], aborted [ghost], committed [3] on one session: the worker, as its own
    principal, writes exactly the committed records' entries (what `replay` of their bytes
    writes); the reader, read_committed, never sees the ghost."""
    peer = f"sec-tx-{uuid.uuid4().hex[:8]}"
    done = run_connector(as_user("connector"), "transactions", tmp_path, E2E_PEER=peer,
                         E2E_TRANSACTIONAL_ID=f"{connector_txn_ids}gw-1")
    out = result(done)
    published, aborted = out["published"], out["aborted"]
    assert [json.loads(p["value"])["send_id"] for p in published] == ["sec-1", "sec-2", "sec-3"]
    assert [json.loads(a["value"])["send_id"] for a in aborted] == ["sec-aborted-ghost"]
    assert len({p["partition"] for p in published + aborted}) == 1  # one session: one partition
    assert secure["connector"]["KAFKA_SASL_PASSWORD"] not in done.stdout + done.stderr

    reader = kafka_settings(as_user("reader"))
    w = WorkerProcess(as_user("worker"), tmp_path / "state", tmp_path / "worker.log").start()
    entries = Collector(reader, reader.topic(ENTRIES))  # read_committed
    try:
        entries.wait_for(lambda r: len(r) >= len(published), 90, w)
        assert w.stop() == 0, w.tail()
    finally:
        entries.close()
        if w.alive():
            w.kill()
    got = [json.loads(r.value) for r in read(reader, reader.topic(ENTRIES))]
    expected = replay_entries([p["value"].encode() for p in published], as_user("worker"))
    assert without_written_at(sorted(got, key=lambda e: e["seq"])) == without_written_at(expected)
    assert [e["seq"] for e in expected] == [1, 2, 3]
    assert "sec-aborted-ghost" not in json.dumps(got)
    log = w.log.read_text(errors="replace")
    assert "AuthorizationFailed" not in log and "dead letter" not in log.lower()


def test_the_connector_may_not_write_transcript_control(as_user, secure, applied, prefix,
                                                        tmp_path):
    """No ACL on transcript.control: refused at connect, the refusal says authorization (not
    "does not exist": the topic is there, the principal may not see it), nothing lands."""
    control = prefix + CONTROL
    line = refusal(run_connector(as_user("connector"), "publish", tmp_path, E2E_TOPIC=control),
                   secure["connector"]["KAFKA_SASL_PASSWORD"])
    assert line == (f"refused: PublishError: topic {control}: TopicAuthorizationFailedError: "
                    "KAFKA_SASL_USERNAME='connector' (SASL SCRAM-SHA-512 over SASL_SSL) is not "
                    "authorized to describe or write it (nor told whether it exists)"), line
    assert nothing_in(kafka_settings(as_user("admin")), control)


def test_a_wrong_password_is_refused_at_connect_and_never_printed(as_user, secure, applied,
                                                                  prefix, tmp_path):
    wrong = f"wrong-{uuid.uuid4().hex}"
    real = secure["connector"]["KAFKA_SASL_PASSWORD"]
    line = refusal(run_connector(as_user("connector", KAFKA_SASL_PASSWORD=wrong), "publish",
                                 tmp_path), wrong, real)
    assert line.startswith("refused: PublishError: cannot connect: authentication failed: "
                           "Kafka at 127.0.0.1:"), line
    assert "KAFKA_SASL_USERNAME='connector'" in line and "SCRAM-SHA-512" in line, line
    assert "SaslAuthenticationFailed" in line, line
    assert nothing_in(kafka_settings(as_user("admin")), prefix + CONFIRMATIONS)


def test_a_ca_that_did_not_sign_the_brokers_certificate_is_refused(as_user, secure, applied,
                                                                   prefix, tmp_path):
    """KAFKA_SSL_CAFILE a real CA certificate, but not the broker's: a TLS error at connect."""
    other_ca = tmp_path / "other-ca.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", str(tmp_path / "other-ca.key"), "-out", str(other_ca),
         "-days", "1", "-subj", "/CN=not the transcript-owner CA"],
        capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    line = refusal(run_connector(as_user("connector", KAFKA_SSL_CAFILE=str(other_ca)),
                                 "publish", tmp_path),
                   secure["connector"]["KAFKA_SASL_PASSWORD"])
    assert line.startswith("refused: PublishError: cannot connect: TLS: the certificate of "
                           "Kafka at 127.0.0.1:"), line
    assert f" did not verify against KAFKA_SSL_CAFILE={other_ca}: " in line, line
    assert "certificate" in line.rsplit(": ", 1)[1], line  # OpenSSL's reason
    assert nothing_in(kafka_settings(as_user("admin")), prefix + CONFIRMATIONS)


def test_topics_yaml_grants_the_connector_no_transactional_id(as_user, secure, applied, prefix,
                                                              tmp_path):
    """The connector principal may write its topic, but topics.yaml gives it no transactional
    id: a publisher with one is refused at connect (init_transactions), saying so, and
    nothing lands; the same publish without one goes through."""
    line = refusal(run_connector(as_user("connector"), "publish", tmp_path,
                                 E2E_TRANSACTIONAL_ID=f"{prefix}connector-gw-1"),
                   secure["connector"]["KAFKA_SASL_PASSWORD"])
    assert line.startswith("refused: PublishError: cannot connect: "
                           "TransactionalIdAuthorizationFailedError: KAFKA_SASL_USERNAME="
                           f"'connector' (SASL SCRAM-SHA-512 over SASL_SSL) may not use the "
                           f"transactional id '{prefix}connector-gw-1'"), line
    admin_ks = kafka_settings(as_user("admin"))
    assert nothing_in(admin_ks, prefix + CONFIRMATIONS)

    [plain] = result(run_connector(as_user("connector"), "publish", tmp_path))["published"]
    assert sum(end_offsets(admin_ks, prefix + CONFIRMATIONS).values()) == 1
    assert plain["topic"] == prefix + CONFIRMATIONS

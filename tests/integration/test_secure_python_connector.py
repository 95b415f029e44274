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
  outside the connector's own (topics.yaml: `<prefix><app_id>.connector-*`), the worker's
  above all.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration import test_secure
from tests.integration.harness import (
    Collector,
    WorkerProcess,
    entry_records,
    replay_entries,
    without_written_at,
)
from tests.integration.test_python_connector import connector_python
from workers.core.outputs import CONFIRMATIONS, CONTROL, ENTRIES
from workers.kafka_io import end_offsets
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


# topics.yaml grants the connector the transactional ids "<prefix><app_id>.connector-*"
CONNECTOR_TXN_IDS = "transcript-owner.connector-"


def test_connector_transactions_over_sasl_ssl_decided_by_the_worker(
        as_user, secure, applied, prefix, tmp_path):
    """Committed [1, 2], aborted [ghost], committed [3] on one session: the worker, as its own
    principal, writes exactly the committed records' entries (what `replay` of their bytes
    writes); the reader, read_committed, never sees the ghost."""
    peer = f"sec-tx-{uuid.uuid4().hex[:8]}"
    done = run_connector(as_user("connector"), "transactions", tmp_path, E2E_PEER=peer,
                         E2E_TRANSACTIONAL_ID=f"{prefix}{CONNECTOR_TXN_IDS}gw-1")
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
    got = [json.loads(r.value) for r in entry_records(reader)]
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


@pytest.mark.parametrize("txn_id", ["connector-gw-1", "transcript-owner-w1"],
                         ids=["outside-its-ids", "the-workers-ids"])
def test_the_connector_may_use_only_its_own_transactional_ids(as_user, secure, applied, prefix,
                                                              tmp_path, txn_id):
    """topics.yaml grants the connector `<prefix><app_id>.connector-*` only: an id outside it,
    and above all one of the worker's (`<prefix><app_id>-<worker>`, which would fence a
    worker's producer), is refused at connect (init_transactions), saying so, and nothing
    lands; the same publish without a transactional id goes through."""
    line = refusal(run_connector(as_user("connector"), "publish", tmp_path,
                                 E2E_TRANSACTIONAL_ID=f"{prefix}{txn_id}"),
                   secure["connector"]["KAFKA_SASL_PASSWORD"])
    assert line.startswith("refused: PublishError: cannot connect: "
                           "TransactionalIdAuthorizationFailedError: KAFKA_SASL_USERNAME="
                           f"'connector' (SASL SCRAM-SHA-512 over SASL_SSL) may not use the "
                           f"transactional id '{prefix}{txn_id}'"), line
    admin_ks = kafka_settings(as_user("admin"))
    assert nothing_in(admin_ks, prefix + CONFIRMATIONS)

    [plain] = result(run_connector(as_user("connector"), "publish", tmp_path))["published"]
    assert sum(end_offsets(admin_ks, prefix + CONFIRMATIONS).values()) == 1
    assert plain["topic"] == prefix + CONFIRMATIONS

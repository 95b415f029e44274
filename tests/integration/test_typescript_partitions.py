"""The TypeScript connector's broker suite (connectors/typescript/test/broker, `npm run
test:broker`): a topic grown under a connected publisher, as `transcript-owner repartition`
grows the input topic, is adopted without a restart; connect() says what to do about another
count (partitions.test.ts; the Python connector's twin is
connectors/python/tests/test_repartition.py). The session reader bound to LATEST or to a
delivery (reader.test.ts, DESIGN 1.3): at once when the position is the input's last stable
offset, stale at the deadline, a waiting read returning when the position record is written, a
delivery off its session's home in two steps, the repartition reason, a session read from the
partition's start, a sink database, LATEST after a repartition waiting at the old home first.
No worker: the tests write entries and positions as it would."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import delete_topics
from tests.typescript_connector import built, failures, tap_summary

pytestmark = pytest.mark.kafka


def test_the_typescript_broker_suite_publisher_and_session_reader(env, kafka_bootstrap):
    package = built()
    node_env = {k: v for k, v in env.items() if k != "NODE_OPTIONS"}
    try:
        done = subprocess.run(["npm", "run", "--silent", "test:broker"], cwd=package,
                              env=node_env, capture_output=True, text=True, timeout=300)
    finally:
        delete_topics(kafka_bootstrap, env["TRANSCRIPT_TOPIC_PREFIX"])
    summary = tap_summary(done.stdout)
    assert done.returncode == 0 and summary.get("fail") == 0 and summary.get("pass") == 10, (
        failures(done.stdout + done.stderr))

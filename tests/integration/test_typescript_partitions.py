"""The TypeScript connector's broker suite (connectors/typescript/test/broker, `npm run
test:broker`): a topic grown under a connected publisher, as `transcript-owner repartition`
grows the input topic, is adopted without a restart; connect() says what to do about another
count. No worker: the Python connector's twin is connectors/python/tests/test_repartition.py."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import delete_topics
from tests.typescript_connector import built, failures, tap_summary

pytestmark = pytest.mark.kafka


def test_a_grown_topic_is_adopted_by_a_connected_typescript_publisher(env, kafka_bootstrap):
    package = built()
    node_env = {k: v for k, v in env.items() if k != "NODE_OPTIONS"}
    try:
        done = subprocess.run(["npm", "run", "--silent", "test:broker"], cwd=package,
                              env=node_env, capture_output=True, text=True, timeout=300)
    finally:
        delete_topics(kafka_bootstrap, env["TRANSCRIPT_TOPIC_PREFIX"])
    summary = tap_summary(done.stdout)
    assert done.returncode == 0 and summary.get("fail") == 0 and summary.get("pass") == 2, (
        failures(done.stdout + done.stderr))

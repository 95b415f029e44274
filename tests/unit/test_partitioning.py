"""Our murmur2 partitioner agrees with the Java client's, as kafka-python and aiokafka port it."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2
from transcript_connector.partitioning import murmur2 as ours
from transcript_connector.partitioning import partition_for


@settings(max_examples=500, derandomize=True)
@given(st.binary(max_size=64) | st.binary(min_size=240, max_size=1100))
def test_murmur2_matches_kafka_python(data):
    """Keys past 63 words too (a Struct made for the key); `ours` is the compiled build after
    make install (tests/unit/test_compiled.py), whose words are machine integers."""
    assert ours(data) & 0xFFFFFFFF == murmur2(data) & 0xFFFFFFFF


def test_murmur2_at_every_length_and_at_the_words_extremes():
    for n in range(300):
        for fill in (b"\x00", b"\xff", b"\x7f", b"\x80"):
            data = fill * n
            assert ours(data) & 0xFFFFFFFF == murmur2(data) & 0xFFFFFFFF, (n, fill)


@settings(max_examples=300, derandomize=True)
@given(st.text(min_size=1, max_size=80), st.integers(min_value=1, max_value=64))
def test_partition_matches_default_partitioner(key, n):
    raw = key.encode()
    expected = DefaultPartitioner()(raw, list(range(n)), list(range(n)))
    assert partition_for(key, n) == expected


def test_known_java_vectors():
    # Values from the Java client's UtilsTest (murmur2 of these strings).
    assert ours(b"21") == -973932308
    assert ours(b"foobar") == -790332482
    assert ours(b"a-little-bit-long-string") == -985981536
    assert ours(b"a-little-bit-longer-string") == -1486304829
    assert ours(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert ours(b"abc") == 479470107


def test_cached_partitions_depend_on_key_and_count():
    keys = ["agent:ops:main", "agent:ops:telegram:group:-100123", "東京", "a"]
    for _ in range(2):  # the second round is answered from the cache
        for key in keys:
            for n in range(1, 65):
                assert partition_for(key, n) == (ours(key.encode()) & 0x7FFFFFFF) % n

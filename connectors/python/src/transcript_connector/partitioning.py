"""Where a session's records live: the Java client's default partitioner, murmur2 of the key.

Every client that follows the contract (the TypeScript gateway, kafka-python, Java) agrees on
`partition_for(session_key, n)`, so a reader finds a session's entries in one partition.
"""

from __future__ import annotations

from functools import lru_cache


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    tail = length4 * 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=1 << 16)
def partition_for(session_key: str, partitions: int) -> int:
    """toPositive(murmur2(key)) % partitions, as the Java default partitioner computes it.

    Cached: the worker asks for every record, over a few thousand live sessions, and murmur2
    in Python costs microseconds per key.
    """
    return (murmur2(session_key.encode("utf-8")) & 0x7FFFFFFF) % partitions

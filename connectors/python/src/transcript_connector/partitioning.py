"""Where a session's records live: the Java client's default partitioner, murmur2 of the key.

Every client that follows the contract (the TypeScript gateway, kafka-python, Java) agrees on
`partition_for(session_key, n)`, so a reader finds a session's entries in one partition.
"""

from __future__ import annotations

from functools import lru_cache
from struct import Struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for mypyc alone: at run time an annotation of a local is never read
    from mypy_extensions import i64

_WORDS = [Struct(f"<{n}I") for n in range(64)]  # n little-endian 4-byte words (keys < 256 B)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int.

    The 4-byte words are read by one struct call (a third faster than assembling each from
    its bytes: at a million sessions the partition cache misses, and this runs per record).
    The worker runs it compiled (deploy/compile/build.py): the `i64`s make mypyc keep the
    arithmetic in machine words (every product is below 2**63), 0.6 µs a key against 3-4."""
    length: i64 = len(data)
    m: i64 = 0x5BD1E995
    h: i64 = (0x9747B28C ^ length) & 0xFFFFFFFF
    words: i64 = length >> 2
    unpack = _WORDS[words] if words < len(_WORDS) else Struct(f"<{words}I")
    for word in unpack.unpack_from(data):
        k: i64 = word
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        h = ((h * m) & 0xFFFFFFFF) ^ ((k * m) & 0xFFFFFFFF)
    tail: i64 = words * 4
    extra: i64 = length - tail
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


def partition_for(session_key: str, partitions: int) -> int:
    """toPositive(murmur2(key)) % partitions, as the Java default partitioner computes it.

    The hash is cached: the worker asks for every record, over a few thousand live sessions,
    and murmur2 in Python costs microseconds per key.
    """
    return _key_hash_cached(session_key) % partitions


def key_hash(session_key: str) -> int:
    """toPositive(murmur2(key)), uncached: what the partitioner takes modulo the partitions."""
    return murmur2(session_key.encode("utf-8")) & 0x7FFFFFFF


# Keyed by the one string, not (key, partitions): a cache of tuple keys is a dict the garbage
# collector untracks at a full collection (only untracked keys and values left in it) and
# tracks again at the next miss, so the worker's collection after each batch traversed all its
# 65,536 entries (workers/stream/heap.py). Keyed by a str, the dict is never tracked.
_key_hash_cached = lru_cache(maxsize=1 << 16)(key_hash)

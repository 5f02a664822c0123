"""Stable, content-derived identifiers and shard assignment.

Ids never depend on run order or wall-clock time, so reruns produce the same ids and joins
across stages and runs are exact (docs/ARCHITECTURE.md, stage contract rule 6).
"""
from __future__ import annotations

import hashlib
import random


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_id(prefix: str, *parts: object) -> str:
    """`prefix:<16 hex>` from the parts' text; for things without a natural id."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(str(part).encode("utf-8"))
        h.update(b"\x1f")  # unit separator: ("ab", "c") and ("a", "bc") differ
    return f"{prefix}:{h.hexdigest()}"


def shard_of(item_id: str, shards: int) -> int:
    """Stable shard number of an id: the same id lands in the same shard on every machine."""
    if shards <= 1:
        return 0
    digest = hashlib.blake2b(item_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def seeded_rng(seed: object, key: object) -> random.Random:
    """A random generator for one item (a question, a paper), from the run's seed and the item's id.

    Derived from sha256, not Python's hash() (salted per process), so the same item draws the same
    numbers on every machine and in any order of the rows.
    """
    digest = hashlib.sha256(f"{seed}\x1f{key}".encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))

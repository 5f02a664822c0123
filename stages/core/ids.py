"""Stable, content-derived identifiers and shard assignment.

Ids never depend on run order or wall-clock time, so reruns produce the same ids and joins
across stages and runs are exact (DESIGN.md, stage contract rule 5).
"""
from __future__ import annotations

import hashlib


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

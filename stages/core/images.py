"""The image store: every image once, keyed by the sha256 of its bytes.

`<root>/<sha[:2]>/<sha>.<ext>`; tables carry the hash (`img:<sha256>` ids), never a path, so the
store can move and be shared across runs. Conversion and safety limits live in the stages that
put images here (cache_images, parse_pdfs).
"""
from __future__ import annotations

from pathlib import Path

from .ids import sha256_hex
from .tables import atomic_write_bytes

DEFAULT_ROOT = "data/cache/images"


class ImageStore:
    def __init__(self, root: str | Path = DEFAULT_ROOT):
        self.root = Path(root)

    def path(self, sha256: str, ext: str) -> Path:
        return self.root / sha256[:2] / f"{sha256}.{ext.lstrip('.').lower()}"

    def put(self, data: bytes, ext: str) -> str:
        """Store bytes (already in their final format) and return their sha256."""
        digest = sha256_hex(data)
        target = self.path(digest, ext)
        if not target.exists():
            atomic_write_bytes(target, data)
        return digest

    def find(self, sha256: str) -> Path | None:
        """The stored file of a hash, whatever its extension."""
        matches = sorted((self.root / sha256[:2]).glob(f"{sha256}.*"))
        return matches[0] if matches else None

    def read(self, sha256: str) -> bytes:
        found = self.find(sha256)
        if found is None:
            raise FileNotFoundError(f"image {sha256} is not in the store at {self.root}")
        return found.read_bytes()

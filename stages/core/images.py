"""The image store: every image once, keyed by the sha256 of its bytes.

`<root>/<sha[:2]>/<sha>.<ext>`; tables carry the hash (`img:<sha256>` ids), never a path, so the
store can move and be shared across runs.

`normalize_image` is the gate in front of the store for images from outside (M2RAG §4.2.3 (1)
"Caching & Conversion"): JPEG, PNG, GIF and WEBP are kept byte for byte once their first frame
decodes; BMP and TIFF are converted to JPEG, with transparency flattened onto white. Pillow may
use no other decoder (`DECODED_FORMATS`): anything else, EPS (which would run Ghostscript) or
PSD included, is `not_an_image`. SVG is rejected (`unsupported_format`), not rasterised: a
renderer is one more parser of untrusted input and SVG can pull external resources. The pixel
limit is checked on the header, before any pixel is decoded, so a 50,000 x 50,000 PNG costs a
few bytes of reading (`pixel_bomb`); undecodable bytes are `not_an_image`, a truncated or corrupt
image `broken_image`.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from .ids import sha256_hex
from .stage import Reject
from .tables import atomic_write_bytes

DEFAULT_ROOT = "data/cache/images"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_USUAL_EXTENSIONS = ("jpg", "png", "gif", "webp", "jpeg")  # what the stages store images as


def is_sha256(value) -> bool:
    """A sha256 in hex, as the stores name files: a table's value is data, and `ab*` or `../x`
    must never name another file."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def file_of_hash(folder: Path, sha256) -> Path | None:
    """`<folder>/<sha256>.<ext>`, whatever the extension (one of them if the bytes were stored
    under several), or None, also for a value that is not a sha256. The usual extensions are
    tried by name first: a glob lists the whole folder, milliseconds a lookup at millions of images."""
    if not is_sha256(sha256):
        return None
    for ext in _USUAL_EXTENSIONS:
        path = folder / f"{sha256}.{ext}"
        if path.is_file():
            return path
    matches = sorted(folder.glob(f"{sha256}.*"))
    return matches[0] if matches else None


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
        """The stored file of a hash, whatever its extension; None for a key that is not a sha256."""
        return file_of_hash(self.root / sha256[:2], sha256) if is_sha256(sha256) else None

    def read(self, sha256: str) -> bytes:
        found = self.find(sha256)
        if found is None:
            raise FileNotFoundError(f"image {sha256} is not in the store at {self.root}")
        return found.read_bytes()


KEPT_FORMATS = {"JPEG": "jpeg", "PNG": "png", "GIF": "gif", "WEBP": "webp"}
# The only decoders Pillow may use. Every `Image.open` passes one of these as `formats=`: left to
# itself Pillow tries each format it knows, and an EPS file makes it run Ghostscript.
STORED_FORMATS = tuple(KEPT_FORMATS)  # what the store holds
DECODED_FORMATS = (*STORED_FORMATS, "BMP", "TIFF")  # what normalize_image reads (BMP, TIFF converted to JPEG)
EXTENSIONS = {"jpeg": "jpg", "png": "png", "gif": "gif", "webp": "webp"}


@dataclass(frozen=True)
class NormalizedImage:
    data: bytes  # the bytes to store: the original, or the JPEG conversion
    format: str  # jpeg | png | gif | webp
    source_format: str  # what was served, lower case (bmp, tiff, jpeg, ...)
    width: int
    height: int

    @property
    def ext(self) -> str:
        return EXTENSIONS[self.format]


def _looks_like_svg(data: bytes) -> bool:
    head = data[:4096].lstrip().lower()
    return head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head)


# The reasons normalize_image rejects with: merged into the `rejects` of the stages that call it.
IMAGE_REJECTS = {
    "unsupported_format": "an SVG image (not rasterised)",
    "pixel_bomb": "the image declares more pixels than max_pixels (read from the header, before decoding)",
    "not_an_image": "the bytes are none of the decodable image formats",
    "broken_image": "a truncated or corrupt image: its first frame does not decode",
}


def normalize_image(data: bytes, max_pixels: int, jpeg_quality: int = 95) -> NormalizedImage:
    """Check and convert downloaded bytes (see module docstring); raises Reject."""
    if _looks_like_svg(data):
        raise Reject("unsupported_format", "SVG is not rasterised")
    try:
        with Image.open(io.BytesIO(data), formats=DECODED_FORMATS) as im:  # parses the header only
            width, height = im.size
            if width * height > max_pixels:
                raise Reject("pixel_bomb", f"{width}x{height} = {width * height} pixels > {max_pixels}")
            source = (im.format or "unknown").lower()
            im.load()  # first frame: a truncated or corrupt image fails here
            if im.format in KEPT_FORMATS:
                return NormalizedImage(data, KEPT_FORMATS[im.format], source, width, height)
            buffer = io.BytesIO()
            flatten_to_rgb(im).save(buffer, "JPEG", quality=jpeg_quality)
            return NormalizedImage(buffer.getvalue(), "jpeg", source, width, height)
    except Image.DecompressionBombError as err:  # Pillow's own limit, should ours be higher
        raise Reject("pixel_bomb", str(err)) from None
    except UnidentifiedImageError:
        raise Reject("not_an_image", f"{len(data)} bytes that are none of {'/'.join(DECODED_FORMATS)}, starting {data[:16]!r}") from None
    except (OSError, SyntaxError, ValueError, EOFError) as err:
        raise Reject("broken_image", f"{type(err).__name__}: {err}") from None


def flatten_to_rgb(im: Image.Image) -> Image.Image:
    """RGB for JPEG: transparency is flattened onto white (convert("RGB") alone would turn it black)."""
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        canvas = Image.new("RGB", rgba.size, (255, 255, 255))
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    return im.convert("RGB")


def is_named_file(path: Path) -> bool:
    """Whether a path a record names (an image beside a release, a dataset's file) is a file. A
    name no file can have, one holding a NUL or past the file system's length, names none: it is
    the record's missing file, not an error of the stage."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def pdf_path(store: str | Path, sha256: str) -> Path:
    """Where the PDF store keeps a paper by the sha256 of its bytes (the layout of ImageStore)."""
    return Path(store) / sha256[:2] / f"{sha256}.pdf"


def fit_longest_side(store: ImageStore, sha256: str, max_side: int) -> tuple[str, Path]:
    """The stored image, or when its longest side exceeds `max_side` a copy scaled down to it (aspect
    kept, same format; a GIF's first frame as PNG), stored by its own sha256 so a model call's cache
    key names the bytes the model saw (M2RAG App. E: images go to MLLMs as 512-pixel thumbnails)."""
    path = store.find(sha256)
    if path is None:
        raise FileNotFoundError(f"image {sha256} is not in the store at {store.root}")
    with Image.open(path, formats=STORED_FORMATS) as im:
        if max(im.size) <= max_side:
            return sha256, path
        fmt = {"GIF": "PNG"}.get(im.format, im.format)
        im.seek(0)
        small = (flatten_to_rgb(im) if fmt == "JPEG" else im.convert("RGBA" if im.mode in ("RGBA", "LA", "P", "PA") else "RGB"))
        small.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        buffer = io.BytesIO()
        small.save(buffer, fmt, **({"quality": 90} if fmt in ("JPEG", "WEBP") else {}))
    ext = EXTENSIONS[KEPT_FORMATS[fmt]]
    sha = store.put(buffer.getvalue(), ext)
    return sha, store.path(sha, ext)

"""Evidence items of MCiteBench: their modalities, the label key that names a figure or table, and
how items are shown to a model. Shared by construction (locating QA, distractors, release) and
evaluation (answers, citation judges, the source probe)."""
from __future__ import annotations

from .refs import parse_refs

EVIDENCE_MODALITIES = ("text", "figure", "table")


def label_key(label: str | None) -> tuple[str, str] | None:
    """("figure", "3") for an element label such as "Figure 3" (None when it is not one)."""
    found = parse_refs(label or "")
    return (found[0].kind, found[0].number) if len(found) == 1 and found[0].kind in ("figure", "table") else None


def shown(items: list[dict], vision: bool, with_captions: bool) -> tuple[list[dict], list[str]]:
    """Template variables for items and the image hashes to attach, in order (<image n> = images[n-1])."""
    out, images = [], []
    for item in items:
        view = {k: item[k] for k in ("label", "modality", "text")}
        view["image"] = vision and item["image_sha256"] is not None
        view["image_number"] = None
        if view["image"]:
            images.append(item["image_sha256"])
            view["image_number"] = len(images)
        view["caption"] = item["caption"] if (with_captions or not vision) else None
        out.append(view)
    return out, images

"""The image a MAVIS judge is shown for a Reddit post: its first kept image in gallery order."""
from __future__ import annotations


def first_image_by_owner(rows: list[dict]) -> dict[str, str]:
    """owner id -> sha256 of its lowest-position image, from images_cached (or images_deduped) rows."""
    best: dict[str, tuple[int, str]] = {}
    for row in rows:
        if row["owner_id"] not in best or row["position"] < best[row["owner_id"]][0]:
            best[row["owner_id"]] = (row["position"], row["sha256"])
    return {owner: sha for owner, (_, sha) in best.items()}

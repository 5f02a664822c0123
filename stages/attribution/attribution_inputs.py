"""Read the attribution items (cite-while-you-generate.txt §3.1 problem setup, §4.1 data).

The seed's data (CliConSummation dialogues, MIMIC-CXR FINDINGS) is credentialed and cannot be
bundled; any JSONL in this format works, one object per line:

    {"id": "dlg-1",                                   required, unique
     "source": "Doctor: ... Patient: ... <image> ...",  required: the text to summarise; at most
                                                        one <image> placeholder marks where the
                                                        image stood in the source
     "image": "images/eye.png",                       optional, relative to the JSONL file
     "image_description": "a photo of a red eye",     optional, shown to the reference judge
     "reference": {                                   optional
        "summary": "reference summary for ROUGE",
        "citations": [{"sentence": "a summary sentence", "sources": [0, 2, "IMG"]}]}}

Reference citations are gold sources of summary sentences; the scorer matches them to generated
sentences by their text (lower-cased, punctuation removed) and asks the judge about the rest.
Source sentences are split after . ! ? and at line breaks (stages/core/attribution.py).

Input: jsonl (the items file). Output: source_items (attr_items), one row per valid line.
Rejects: bad_json, bad_field (a missing or mistyped field, a source id out of range),
duplicate_id, empty_source (no sentence), image_missing (the file is not there), bad_placeholder
(more than one <image>). Invariant: lines = rows + rejects.
"""
from __future__ import annotations

import json
from pathlib import Path

from stages.core.attribution import IMG, split_source
from stages.core.stage import Input, Output, Reject, Stage, StageError

VERSION = "1"


def _field(record: dict, name: str, kind: type, required: bool = False):
    value = record.get(name)
    if value is None:
        if required:
            raise Reject("bad_field", f"{name!r} is missing")
        return None
    if not isinstance(value, kind):
        raise Reject("bad_field", f"{name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _citations(reference: dict, n_sentences: int, has_image: bool) -> list[dict]:
    out = []
    for i, entry in enumerate(reference.get("citations") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("sentence"), str) or not isinstance(entry.get("sources"), list):
            raise Reject("bad_field", f"reference.citations[{i}] must be {{sentence: str, sources: list}}")
        sources = []
        for s in entry["sources"]:
            if s == IMG and has_image:
                sources.append(IMG)
            elif isinstance(s, int) and not isinstance(s, bool) and 0 <= s < n_sentences:
                sources.append(str(s))
            else:
                raise Reject("bad_field", f"reference.citations[{i}] cites {s!r}: not a source sentence id 0-{n_sentences - 1}"
                             + (" or IMG" if has_image else ""))
        out.append({"sentence": entry["sentence"], "sources": sources})
    return out


def parse_item(record, base: Path) -> dict:
    if not isinstance(record, dict):
        raise Reject("bad_field", "a line must hold a JSON object")
    item_id = _field(record, "id", str, required=True)
    source = _field(record, "source", str, required=True)
    image = _field(record, "image", str)
    reference = _field(record, "reference", dict) or {}
    try:
        sentences, position = split_source(source)
    except ValueError as err:
        raise Reject("bad_placeholder", str(err)) from None
    if not sentences:
        raise Reject("empty_source", "the source has no sentence")
    path = None
    if image:
        path = (base / image).resolve()
        if not path.is_file():
            raise Reject("image_missing", f"image {image!r} is not a file under {base}")
    summary = reference.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise Reject("bad_field", "reference.summary must be a string")
    return {
        "id": item_id, "source": source, "sentences": sentences,
        "image": str(path) if path else None,
        "image_position": (position if position is not None else len(sentences)) if path else None,
        "image_description": _field(record, "image_description", str),
        "reference_summary": summary,
        "reference_citations": _citations(reference, len(sentences), path is not None),
    }


def run(ctx):
    path = Path(ctx.input_path("jsonl"))
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise StageError(f"cannot read items {path}: {err}") from None
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        with ctx.item(f"{path.name}:{number}"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise Reject("bad_json", f"line {number}: {err.msg} at char {err.pos}") from None
            row = parse_item(record, path.parent)
            if row["id"] in seen:
                raise Reject("duplicate_id", f"id {row['id']!r} appears again on line {number}")
            seen.add(row["id"])
            ctx.stats["with_image"] += row["image"] is not None
            ctx.stats["with_reference_citations"] += bool(row["reference_citations"])
            ctx.write("source_items", [row])


STAGE = Stage(
    name="attribution_inputs",
    version=VERSION,
    doc=__doc__,
    inputs={"jsonl": Input("the items as JSONL (format in the module doc)", kind="file")},
    outputs={"source_items": Output("attr_items", "one row per valid item")},
    params={},
    run=run,
)

if __name__ == "__main__":
    STAGE.main()

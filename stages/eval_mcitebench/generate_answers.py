"""Run one candidate model on an MCiteBench release in the benchmark's task format (mcitebench.txt §3.1,
§5.1 "Implement Details"; Table 14 for the caption option).

For each record of the release's `mcitebench.jsonl` (the released record format;
tests/data/mcitebench_data_example.jsonl holds three real ones): the evidence and distractor items (5 in the benchmark) are shuffled by a
generator seeded per question (`stages.core.ids.seeded_rng(seed, question_id)`, so the gold item's position is not the same in every
question); text items are shown as "[k] text" with their `idx_2_text` number; figures and tables
are sent as images labelled "Figure N" / "Table N" from `image_2_idx` / `table_2_idx`. With
`with_captions` their captions follow them (Table 14). A model that cannot see images (`vision`
false; by default the embedded llamacpp backend) gets each figure/table's caption in its place,
or only its label when the release has no caption; the row records `vision` so a report never
mixes the two silently. Captions come from any Parquet table in the release's `parquet/` folder
with `image_sha256` and `caption` columns (citeforge releases have one), and, for a locating
record's evidence image, from its `meta_data.img_caption` (a figure) or `itable_caption` (a table):
MCiteBench's released records carry them there, and captions are the paper's main setting. Images are put into the image store the model client reads (content-addressed). An image
path `images/<sha256>.jpg` is found next to the JSONL (citeforge releases) or, as in MCiteBench's
released data, under a visual-resources folder beside it, one folder per paper
(`visual_resources*/<pdf_id>/images/<sha256>.jpg`).

The record also yields the scoring keys: `gold` (labels of the evidence items), `modality` (of
the evidence items: figure, table, text, or mixed when they differ) and `source` (single / multi).
One response per (model, question).

Inputs: release: the release manifest JSON ({"path": folder}), or a release folder, or its
`mcitebench.jsonl`.
Outputs: responses (eval_responses).
Every line is checked where it enters: bad_json (not JSON, not UTF-8), bad_record (not an object,
a field missing, of the wrong type, e.g. an integer `question_id` or a list for `text_2_idx`, or
inconsistent: an item without a number), duplicate_id (a question_id seen on an earlier line; the
first is kept), missing_image (an image file named by the record is absent), invalid_answer (the
model call failed; raw and reason kept).
Params: model, llm, vision, with_captions, seed, limit, max_tokens.
"""
from __future__ import annotations

import glob
import json
from pathlib import Path

import pyarrow.parquet as pq

from stages.core.ids import content_id, seeded_rng
from stages.core.evidence import shown
from stages.core.images import ImageStore, is_named_file
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.refs import figure_table_refs
from stages.core.release import manifest_folder
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.schema_check import read_json

VERSION = "3"  # 2: items shuffled by core seeded_rng; 3: meta_data captions of published records
PROMPT = "mcitebench_answer"
FIELDS = {"question_id": str, "pdf_id": str, "question_type": str, "question": str, "answer": str, "evidence_keys": list,
          "evidence_contents": list, "text_2_idx": dict, "image_2_idx": dict, "table_2_idx": dict, "distractor_contents": list}
STRING_LISTS = ("evidence_keys", "evidence_contents", "distractor_contents")


def item_id(record: object, n: int) -> str:
    """The record's question_id, or its line number when it has no usable one."""
    qid = record.get("question_id") if isinstance(record, dict) else None
    return qid if isinstance(qid, str) and qid else f"line:{n}"


def check_record(record: object) -> dict:
    """A parsed line as a record with every field the task needs, of its type; or Reject."""
    if isinstance(record, ValueError):
        raise Reject("bad_json", f"not JSON: {record}")
    if not isinstance(record, dict):
        raise Reject("bad_record", f"not a JSON object: a {type(record).__name__}")
    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise Reject("bad_record", f"missing fields {missing}")
    for field, kind in FIELDS.items():
        value = record[field]
        if not isinstance(value, kind) or (field in STRING_LISTS and not all(isinstance(v, str) for v in value)):
            raise Reject("bad_record", f"field {field!r} must be {kind.__name__}{' of strings' if field in STRING_LISTS else ''}, "
                                       f"got {type(value).__name__} {str(value)[:80]!r}")
    return record


def release_file(path: str) -> Path:
    """The release's mcitebench.jsonl from a manifest, a folder or the file itself."""
    given = Path(path)
    if given.is_dir():
        found = given / "mcitebench.jsonl"
    elif given.suffix == ".json":
        found = manifest_folder(given) / "mcitebench.jsonl"
    else:
        found = given
    if not found.exists():
        raise StageError(f"release: {found} does not exist (given {path})")
    return found


def release_captions(folder: Path) -> dict[str, str]:
    """image sha256 -> caption, from any release table that has both columns."""
    captions: dict[str, str] = {}
    for table_path in sorted((folder / "parquet").glob("*.parquet")):
        if {"image_sha256", "caption"} <= set(pq.read_schema(table_path).names):
            for row in pq.read_table(table_path, columns=["image_sha256", "caption"]).to_pylist():
                if row["image_sha256"] and row["caption"]:
                    captions.setdefault(row["image_sha256"], row["caption"])
    return captions


def _item_label(record: dict, content: str, evidence_key: str | None) -> tuple[str, str]:
    if not content.startswith("images/"):
        if content not in record["text_2_idx"]:
            raise Reject("bad_record", f"text item not in text_2_idx: {content[:80]!r}")
        return f"[{record['text_2_idx'][content]}]", "text"
    if content in record["image_2_idx"]:
        return f"Figure {record['image_2_idx'][content]}", "figure"
    if content in record["table_2_idx"]:
        return f"Table {record['table_2_idx'][content]}", "table"
    refs = figure_table_refs(evidence_key or "")
    if refs:  # an evidence image missing from both maps: its evidence key still names it
        return refs[0].label, refs[0].kind
    raise Reject("bad_record", f"image {content} has no figure or table number")


def image_path(folder: Path, pdf_id: str, content: str) -> Path:
    """Where an item's image is: beside the JSONL, or in MCiteBench's per-paper visual resources."""
    candidates = [folder / content, *sorted(folder.glob(f"visual_resources*/{glob.escape(pdf_id)}/{glob.escape(content)}"))]
    for path in candidates:
        if is_named_file(path):
            return path
    raise Reject("missing_image", f"{content} is neither at {folder / content} nor under {folder}/visual_resources*/{pdf_id}/")


def meta_caption(record: dict, modality: str) -> str | None:
    """The caption a locating record's meta_data gives its evidence image (img_caption for a
    figure, itable_caption for a table); None when absent or not text."""
    meta = record.get("meta_data")
    caption = meta.get("img_caption" if modality == "figure" else "itable_caption") if isinstance(meta, dict) else None
    return caption.strip() or None if isinstance(caption, str) else None


def task_items(record: dict, folder: Path, seed: int, captions: dict[str, str], store: ImageStore) -> list[dict]:
    """The record's items in the order shown: evidence and distractors shuffled per question."""
    evidence, keys = record["evidence_contents"], record["evidence_keys"]
    if not evidence:
        raise Reject("bad_record", "no evidence")
    single = len(evidence) == 1  # meta_data's caption is the one evidence image's (a locating question)
    entries = [(c, keys[i] if i < len(keys) else None, True) for i, c in enumerate(evidence)]
    entries += [(c, None, False) for c in record["distractor_contents"]]
    items = []
    for content, key, is_evidence in entries:
        label, modality = _item_label(record, content, key)
        item = {"label": label, "modality": modality, "text": None, "image_sha256": None, "caption": None, "is_evidence": is_evidence}
        if modality == "text":
            item["text"] = content.strip()
        else:
            path = image_path(folder, record["pdf_id"], content)
            item["image_sha256"] = store.put(path.read_bytes(), path.suffix or ".jpg")
            item["caption"] = captions.get(Path(content).stem) or (meta_caption(record, modality) if is_evidence and single else None)
        items.append(item)
    labels = [i["label"] for i in items]
    if len(set(labels)) != len(labels):
        raise Reject("bad_record", f"two items share a label: {labels}")
    seeded_rng(seed, record["question_id"]).shuffle(items)
    return items


def evidence_modality(items: list[dict]) -> str:
    kinds = {i["modality"] for i in items if i["is_evidence"]}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def run(ctx):
    params = ctx.params
    path = release_file(ctx.input_path("release"))
    folder = path.parent
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:  # its call cache is closed on any error
        store = ImageStore(client.settings["image_store"])
        captions = release_captions(folder)
        vision = sees_images(params)
        rows, requests = [], []
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
        ctx.stats["records_in_release"] = len(lines)
        if params["limit"]:
            lines = lines[: params["limit"]]
        seen: dict[str, int] = {}
        for n, line in enumerate(lines, 1):
            try:
                record = read_json(line)
            except ValueError as err:  # not JSON, or not UTF-8
                record = err
            with ctx.item(item_id(record, n)):
                record = check_record(record)
                if record["question_id"] in seen:
                    raise Reject("duplicate_id", f"{path}:{n}: question_id seen on line {seen[record['question_id']]}; the first is kept")
                seen[record["question_id"]] = n
                row, request = task(record, task_items(record, folder, params["seed"], captions, store), vision, params)
                rows.append(row)
                requests.append(request)
        answers = client.run(requests, desc=f"answers {params['model']}")
        for row, answer in zip(rows, answers):
            with ctx.item(row["id"], counted=False):
                if not answer.ok:
                    raise Reject("invalid_answer", answer.detail)
                row["response"] = answer.value
                row["finish_reason"] = answer.finish_reason
                ctx.stats["truncated"] += answer.finish_reason == "length"
                ctx.write("responses", [row])


def task(record: dict, items: list[dict], vision: bool, params: dict) -> tuple[dict, LLMRequest]:
    """The response row (its response still empty) and the model request of one record."""
    views, images = shown(items, vision, params["with_captions"])
    row = {
        "id": content_id("resp", params["model"], record["question_id"]),
        "model": params["model"],
        "question_id": record["question_id"],
        "pdf_id": record["pdf_id"],
        "question_type": record["question_type"],
        "question": record["question"],
        "answer": record["answer"],
        "meta_json": json.dumps(record.get("meta_data") or {}, ensure_ascii=False, sort_keys=True),
        "modality": evidence_modality(items),
        "source": "single" if len(record["evidence_contents"]) == 1 else "multi",
        "gold": [i["label"] for i in items if i["is_evidence"]],
        "items": items,
        "with_captions": params["with_captions"],
        "vision": vision,
        "response": None,
        "finish_reason": None,
    }
    sampling = {"max_tokens": params["max_tokens"]} if params["max_tokens"] else None
    return row, LLMRequest(id=row["id"], prompt=PROMPT, variables={"items": views, "question": record["question"]},
                           images=images, sampling=sampling)


STAGE = Stage(
    name="generate_answers",
    version=VERSION,
    doc=__doc__,
    inputs={"release": Input("release manifest JSON, release folder, or its mcitebench.jsonl", kind="file")},
    outputs={"responses": Output("eval_responses", "one response per question")},
    params={
        "model": Param(str, help="the candidate's name (config evaluate.models[].name)"),
        "llm": Param(dict, {}, "llm settings of the candidate (the llm: section with the model's overrides)", schema="llm"),
        "vision": Param(bool, None, "send figures/tables as images; null = what the backend takes (llamacpp: no)"),
        "with_captions": Param(bool, True, "add figure/table captions after their images, the setting of the seed's main "
                                           "results (Table 2); false is the Table 14 \"No Cap.\" ablation"),
        "seed": Param(int, 42, "seed of the per-question item shuffle"),
        "limit": Param(int, 0, "evaluate only the first N records of the release (0 = all)", min=0),
        "max_tokens": Param(int, 1024, "answer length budget in tokens: explanation answers are long-form (§5), so at "
                                        "least 1024 (0 = the prompt's default)", min=0),
    },
    run=run,
    prompts=("mcitebench_answer",),
    rejects={
        "bad_json": "the line is not JSON (or not UTF-8)",
        "bad_record": "not an object, a field missing or of the wrong type, or inconsistent (an item without a number)",
        "duplicate_id": "a question_id seen on an earlier line (the first is kept)",
        "missing_image": "an image file the record names is absent",
        "invalid_answer": "the model call failed after the client's retries (raw text and reason kept)",
    },
)

if __name__ == "__main__":
    STAGE.main()

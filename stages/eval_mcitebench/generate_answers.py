"""Run one candidate model on an MCiteBench release in the benchmark's task format (mcitebench.txt §3.1,
§5.1 "Implement Details"; Table 14 for the caption option).

For each record of the release's `mcitebench.jsonl` (the released record format, see
tests/data/mcitebench_data_example.jsonl holds three real ones): the evidence and distractor items (5 in the benchmark) are shuffled by a
generator seeded per question (`stages.core.ids.seeded_rng(seed, question_id)`, so the gold item's position is not the same in every
question); text items are shown as "[k] text" with their `idx_2_text` number; figures and tables
are sent as images labelled "Figure N" / "Table N" from `image_2_idx` / `table_2_idx`. With
`with_captions` their captions follow them (Table 14). A model that cannot see images (`vision`
false; by default the embedded llamacpp backend) gets each figure/table's caption in its place,
or only its label when the release has no caption; the row records `vision` so a report never
mixes the two silently. Captions come from any Parquet table in the release's `parquet/` folder
with `image_sha256` and `caption` columns (citeforge releases have one; MCiteBench's own data has
none). Images are put into the image store the model client reads (content-addressed).

The record also yields the scoring keys: `gold` (labels of the evidence items), `modality` (of
the evidence items: figure, table, text, or mixed when they differ) and `source` (single / multi).
One response per (model, question).

Inputs: release: the release manifest JSON ({"path": folder}), or a release folder, or its
`mcitebench.jsonl`.
Outputs: responses (eval_responses).
Rejects: bad_record (a field missing or inconsistent: an item without a number), missing_image
(an image file named by the record is absent), duplicate_id (a question_id already read: the
first record keeps it), invalid_answer (the model call failed; raw and
reason kept).
Params: model, llm, vision, with_captions, seed, limit, max_tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from stages.core.ids import content_id, seeded_rng
from stages.core.evidence import shown
from stages.core.images import ImageStore
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.refs import figure_table_refs
from stages.core.stage import Input, Output, Param, Stage, StageError

VERSION = "2"  # 2: items shuffled by core seeded_rng
PROMPT = "mcitebench_answer"
REQUIRED = ("question_id", "pdf_id", "question_type", "question", "answer", "evidence_keys", "evidence_contents",
            "text_2_idx", "image_2_idx", "table_2_idx", "distractor_contents")


class BadRecord(ValueError):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def release_file(path: str) -> Path:
    """The release's mcitebench.jsonl from a manifest, a folder or the file itself."""
    given = Path(path)
    if given.is_dir():
        found = given / "mcitebench.jsonl"
    elif given.suffix == ".json":
        manifest = json.loads(given.read_text())
        if "path" not in manifest:
            raise StageError(f"release manifest {given} has no 'path'")
        found = Path(manifest["path"]) / "mcitebench.jsonl"
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
            raise BadRecord("bad_record", f"text item not in text_2_idx: {content[:80]!r}")
        return f"[{record['text_2_idx'][content]}]", "text"
    if content in record["image_2_idx"]:
        return f"Figure {record['image_2_idx'][content]}", "figure"
    if content in record["table_2_idx"]:
        return f"Table {record['table_2_idx'][content]}", "table"
    refs = figure_table_refs(evidence_key or "")
    if refs:  # an evidence image missing from both maps: its evidence key still names it
        return refs[0].label, refs[0].kind
    raise BadRecord("bad_record", f"image {content} has no figure or table number")


def task_items(record: dict, folder: Path, seed: int, captions: dict[str, str], store: ImageStore) -> list[dict]:
    """The record's items in the order shown: evidence and distractors shuffled per question."""
    missing = [f for f in REQUIRED if f not in record]
    if missing:
        raise BadRecord("bad_record", f"missing fields {missing}")
    evidence, keys = record["evidence_contents"], record["evidence_keys"]
    if not evidence:
        raise BadRecord("bad_record", "no evidence")
    entries = [(c, keys[i] if i < len(keys) else None, True) for i, c in enumerate(evidence)]
    entries += [(c, None, False) for c in record["distractor_contents"]]
    items = []
    for content, key, is_evidence in entries:
        label, modality = _item_label(record, content, key)
        item = {"label": label, "modality": modality, "text": None, "image_sha256": None, "caption": None, "is_evidence": is_evidence}
        if modality == "text":
            item["text"] = content.strip()
        else:
            path = folder / content
            if not path.exists():
                raise BadRecord("missing_image", f"{path} does not exist")
            item["image_sha256"] = store.put(path.read_bytes(), path.suffix or ".jpg")
            item["caption"] = captions.get(Path(content).stem)
        items.append(item)
    labels = [i["label"] for i in items]
    if len(set(labels)) != len(labels):
        raise BadRecord("bad_record", f"two items share a label: {labels}")
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
        with path.open() as fh:
            lines = [line for line in fh if line.strip()]
        ctx.stats["records_in_release"] = len(lines)
        if params["limit"]:
            lines = lines[: params["limit"]]
        seen: dict = {}  # question_id -> line it was first read on
        for n, line in enumerate(lines):
            ctx.add_input()
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise BadRecord("bad_record", "not a JSON object")
                items = task_items(record, folder, params["seed"], captions, store)
            except json.JSONDecodeError as err:
                ctx.reject(f"line:{n + 1}", "bad_record", f"{path}:{n + 1}: not JSON: {err}")
                continue
            except BadRecord as err:
                where = record.get("question_id", f"line:{n + 1}") if isinstance(record, dict) else f"line:{n + 1}"
                ctx.reject(str(where), err.reason, f"{path}:{n + 1}: {err}")
                continue
            if record["question_id"] in seen:  # one response per (model, question): the first record wins
                ctx.reject(str(record["question_id"]), "duplicate_id", f"{path}:{n + 1}: question_id {record['question_id']!r} "
                           f"already read on line {seen[record['question_id']]}")
                continue
            seen[record["question_id"]] = n + 1
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
            }
            rows.append(row)
            sampling = {"max_tokens": params["max_tokens"]} if params["max_tokens"] else None
            requests.append(LLMRequest(id=row["id"], prompt=PROMPT, variables={"items": views, "question": record["question"]},
                                       images=images, sampling=sampling))
        answers = client.run(requests, desc=f"answers {params['model']}")
        for row, answer in zip(rows, answers):
            if not answer.ok:
                ctx.reject(row["id"], "invalid_answer", answer.detail)
                continue
            row["response"] = answer.value
            ctx.write("responses", [row])


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
)

if __name__ == "__main__":
    STAGE.main()

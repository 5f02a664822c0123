"""Harvest user queries from an ELI5-style dataset (M2RAG §4.1 and App. A: "the queries are sourced
from the ELI5 dataset").

`datasets.load_dataset(path, name, split=..., data_files=...)`: on real runs `path` is a Hub
dataset id; offline (the demo) `path` is a builder such as `json` and the files arrive as the
`data_files` input. `fields` maps the dataset's columns (dotted paths reach into nested columns,
e.g. `answers.text`) onto the `m2rag_queries` columns id, question, body, subreddit, answers.

Output: `queries` (m2rag_queries), one shard per `--output queries=...` path, by a stable hash of
the id. Rejects: `missing_id` (no id; the reject names the row number), `empty_question` (no
question text), `duplicate_id` (an id seen before; the first row wins). Invariant: rows read (after `limit`) = rows written + rejected.

Params: path, name, split, revision, fields, id_prefix, limit, cache_dir.
"""
from __future__ import annotations

from typing import Any

from tqdm import tqdm

from stages.core.ids import shard_of
from stages.core.stage import Input, Output, Param, Stage, StageError

VERSION = "1"
TARGETS = ("id", "question", "body", "subreddit", "answers")


def lookup(row: dict, dotted: str) -> Any:
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def as_text_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value if v is not None]


def load(ctx):
    import datasets  # heavy import, only when the stage runs

    params = ctx.params
    data_files = ctx.input_paths("data_files") or None
    try:
        return datasets.load_dataset(
            params["path"], params["name"], split=params["split"], data_files=data_files,
            revision=params["revision"], cache_dir=params["cache_dir"],
        )
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as err:
        raise StageError(f"cannot load dataset {params['path']!r} (split {params['split']!r}, files {data_files}): {err}") from None


def run(ctx):
    fields = ctx.params["fields"]
    missing = [t for t in ("id", "question") if t not in fields]
    unknown = sorted(set(fields) - set(TARGETS))
    if missing or unknown:
        raise StageError(f"param fields must map id and question (missing {missing}); allowed targets {TARGETS}, unknown {unknown}")
    dataset = load(ctx)
    columns = set(dataset.column_names)
    absent = {t: f for t, f in fields.items() if f.split(".")[0] not in columns}
    if absent:
        raise StageError(f"fields {absent} name columns the dataset lacks; it has {sorted(columns)}")
    if ctx.params["limit"] is not None:
        dataset = dataset.select(range(min(ctx.params["limit"], len(dataset))))
    source = f"{ctx.params['path']}:{ctx.params['split']}"
    shards = len(ctx.output_paths("queries"))
    seen: set[str] = set()
    for number, row in enumerate(tqdm(dataset, desc="queries", unit="row")):
        ctx.add_input()
        raw_id = lookup(row, fields["id"])
        if raw_id is None or not str(raw_id).strip():
            ctx.reject(f"{ctx.params['id_prefix']}:#{number}", "missing_id", f"field {fields['id']!r} is empty in row {number}")
            continue
        query_id = f"{ctx.params['id_prefix']}:{raw_id}"
        question = (lookup(row, fields["question"]) or "").strip()
        if not question:
            ctx.reject(query_id, "empty_question", f"field {fields['question']!r} is empty")
            continue
        if query_id in seen:
            ctx.reject(query_id, "duplicate_id", f"{fields['id']!r} repeats; the first row was kept")
            continue
        seen.add(query_id)
        ctx.writer("queries", shard_of(query_id, shards)).write(
            {
                "id": query_id,
                "question": question,
                "body": (lookup(row, fields["body"]) or "") if "body" in fields else "",
                "subreddit": (lookup(row, fields["subreddit"]) or "") if "subreddit" in fields else "",
                "answers": as_text_list(lookup(row, fields["answers"])) if "answers" in fields else [],
                "source": source,
            }
        )


STAGE = Stage(
    name="harvest_hub_dataset",
    version=VERSION,
    doc=__doc__,
    inputs={"data_files": Input("local data files for the builder named by `path` (offline runs)", many=True, optional=True, kind="file")},
    outputs={"queries": Output("m2rag_queries", "query shards, one path per shard", many=True)},
    params={
        "path": Param(str, help="Hub dataset id, or a builder (json, csv, parquet) reading the data_files input"),
        "name": Param(str, None, "dataset configuration name"),
        "split": Param(str, "train", "split to read"),
        "revision": Param(str, None, "Hub revision (commit or tag) for a reproducible harvest"),
        "fields": Param(dict, {"id": "q_id", "question": "title", "body": "selftext", "subreddit": "subreddit", "answers": "answers.text"},
                        "m2rag_queries column -> dataset column (dotted path into nested columns)", fields={
                            "id": Param(str, help="dataset column of the query id"),
                            "question": Param(str, help="dataset column of the question"),
                            "body": Param(str, "", "dataset column of the question body"),
                            "subreddit": Param(str, "", "dataset column of the subreddit"),
                            "answers": Param(str, "", "dataset column of the answers"),
                        }),
        "id_prefix": Param(str, "eli5", "ids are <id_prefix>:<dataset id>"),
        "limit": Param(int, None, "read only the first N rows", min=1),
        "cache_dir": Param(str, "data/cache/hub_datasets", "datasets' download and Arrow cache"),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()

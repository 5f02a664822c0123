"""Harvest user queries from an ELI5-style dataset (M2RAG §4.1 and App. A: "the queries are sourced
from the ELI5 dataset").

On real runs `path` is a Hub dataset id read by `datasets.load_dataset(path, name, split=...)`.
Offline (the demo) `path` is `json` and the JSONL files arrive as the `data_files` input; the stage
reads them line by line itself, so one broken line is one reject, not a failed load of the whole
file (other builders, csv or parquet, still go through `datasets`; the csv builder reads every
mapped column as text, so an id `007` stays `007` and one empty cell does not turn a column of ids
into floats, and only an empty cell is null: `NA` or `None` stay text). A file a builder cannot
parse (a ragged or empty CSV, a broken Parquet file) is one error naming the files. `fields` maps
the dataset's columns (dotted paths reach into nested columns, e.g. `answers.text`) onto the
`m2rag_queries` columns id, question, body, subreddit, answers; a field no row has is a config
error. A string id loses its surrounding whitespace (`"a1 "` is `a1`, so it repeats an `a1` row); an
integer id is its decimal text (`7` and `"7"` are the same id).

Output: `queries` (m2rag_queries), one shard per `--output queries=...` path, by a stable hash of
the id. Rejects (a row without a usable id is named `<id_prefix>:#<row number>`): `bad_json` (a line
that is not JSON or not UTF-8), `bad_record` (a line that is not a JSON object), `wrong_type` (a
mapped field of the wrong type: an id that is not a string or integer, a question that is not a
string, answers that are not strings), `missing_id` (no id), `bad_id` (an id with a character that
is not printable inside it: a line break, tab, control character), `empty_question` (no question
text), `duplicate_id` (an id seen before; the first row wins). Invariant: rows read (after `limit`)
= rows written + rejected.

Params: path, name, split, revision, fields, id_prefix, limit, cache_dir.
"""
from __future__ import annotations

import itertools
from typing import Any, Iterator

from tqdm import tqdm

from stages.core.ids import shard_of
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.schema_check import read_json

VERSION = "2"
TARGETS = ("id", "question", "body", "subreddit", "answers")


def lookup(row: dict, dotted: str) -> Any:
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def text_of(row: dict, fields: dict, target: str) -> str:
    value = lookup(row, fields[target]) if target in fields else None
    if value is not None and not isinstance(value, str):
        raise Reject("wrong_type", f"field {fields[target]!r} is a {type(value).__name__}, not a string: {str(value)[:80]!r}")
    return value or ""


def answers_of(row: dict, fields: dict) -> list[str]:
    value = lookup(row, fields["answers"]) if "answers" in fields else None
    texts = [value] if isinstance(value, str) else [] if value is None else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts if t is not None):
        raise Reject("wrong_type", f"field {fields['answers']!r} must be strings, got {str(value)[:80]!r}")
    return [t for t in texts if t is not None]


def jsonl_rows(paths: list[str]) -> Iterator[dict | Reject]:
    """Each non-blank line of local JSONL files: the object, or the Reject it earns."""
    for path in paths:
        with open(path, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = read_json(line)
                except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
                    yield Reject("bad_json", f"{path}:{n}: {err}")
                    continue
                yield row if isinstance(row, dict) else Reject("bad_record", f"{path}:{n}: a JSON {type(row).__name__}, not an object")


def hub_rows(ctx) -> Iterator[dict]:
    import datasets  # heavy import, only when the stage needs it

    params = ctx.params
    data_files = ctx.input_paths("data_files") or None
    as_text = {"converters": {f.split(".")[0]: str for f in params["fields"].values()}, "keep_default_na": False,
               "na_values": [""]} if params["path"] == "csv" else {}
    try:
        dataset = datasets.load_dataset(
            params["path"], params["name"], split=params["split"], data_files=data_files,
            revision=params["revision"], cache_dir=params["cache_dir"], **as_text,
        )
    except (OSError, ValueError, datasets.exceptions.DatasetNotFoundError, datasets.exceptions.DatasetGenerationError) as err:
        # OSError: a file, or the Hub not reached; DatasetGenerationError: a builder could not parse a file (its cause says why)
        cause = err.__cause__ if isinstance(err, datasets.exceptions.DatasetGenerationError) and err.__cause__ else err
        raise StageError(f"cannot load dataset {params['path']!r} (split {params['split']!r}, files {data_files}): {cause}") from None
    check_fields(ctx.params["fields"], set(dataset.column_names))
    return iter(dataset)


def check_fields(fields: dict, columns: set[str]) -> None:
    absent = {t: f for t, f in fields.items() if f.split(".")[0] not in columns}
    if absent:
        raise StageError(f"fields {absent} name columns the dataset lacks; it has {sorted(columns)}")


def run(ctx):
    fields = ctx.params["fields"]
    missing = [t for t in ("id", "question") if t not in fields]
    unknown = sorted(set(fields) - set(TARGETS))
    if missing or unknown:
        raise StageError(f"param fields must map id and question (missing {missing}); allowed targets {TARGETS}, unknown {unknown}")
    local = ctx.params["path"] == "json" and ctx.has_input("data_files")
    rows = jsonl_rows(ctx.input_paths("data_files")) if local else hub_rows(ctx)
    rows = itertools.islice(rows, ctx.params["limit"])
    source = f"{ctx.params['path']}:{ctx.params['split']}"
    shards = len(ctx.output_paths("queries"))
    seen: set[str] = set()
    columns: set[str] = set()  # the top-level keys the JSONL rows have, for the fields check
    for number, row in enumerate(tqdm(rows, desc="queries", unit="row")):
        raw_id = lookup(row, fields["id"]) if isinstance(row, dict) else None
        wrong_id = raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)))
        key = "" if wrong_id or raw_id is None else str(raw_id).strip()
        usable = bool(key) and key.isprintable()
        query_id = f"{ctx.params['id_prefix']}:{key if usable else f'#{number}'}"
        with ctx.item(query_id):
            if isinstance(row, Reject):
                raise row
            columns.update(row)
            if wrong_id:
                raise Reject("wrong_type", f"field {fields['id']!r} is a {type(raw_id).__name__}: {str(raw_id)[:80]!r}")
            if not key:
                raise Reject("missing_id", f"field {fields['id']!r} is empty in row {number}")
            if not usable:
                raise Reject("bad_id", f"field {fields['id']!r} has a line break or other unprintable character: {key[:80]!r}")
            question = text_of(row, fields, "question").strip()
            if not question:
                raise Reject("empty_question", f"field {fields['question']!r} is empty")
            query = {"id": query_id, "question": question, "body": text_of(row, fields, "body"),
                     "subreddit": text_of(row, fields, "subreddit"), "answers": answers_of(row, fields), "source": source}
            if query_id in seen:
                raise Reject("duplicate_id", f"{fields['id']!r} repeats; the first row was kept")
            seen.add(query_id)
            ctx.writer("queries", shard_of(query_id, shards)).write(query)
    if local and columns:
        check_fields(fields, columns)


STAGE = Stage(
    name="harvest_hub_dataset",
    version=VERSION,
    doc=__doc__,
    inputs={"data_files": Input("local data files for the builder named by `path` (offline runs)", many=True, optional=True, kind="file")},
    outputs={"queries": Output("m2rag_queries", "query shards, one path per shard", many=True)},
    params={
        "path": Param(str, help="Hub dataset id, or a builder (json, csv, parquet) reading the data_files input", min=1),
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
    rejects={
        "bad_json": "a line that is not JSON or not UTF-8",
        "bad_record": "a line that is not a JSON object",
        "wrong_type": "a mapped field of the wrong type (an id neither string nor integer, a non-string question or answer)",
        "missing_id": "the row has no id",
        "bad_id": "the id has a line break, tab or other unprintable character inside it",
        "empty_question": "the row has no question text",
        "duplicate_id": "an id seen before (the first row is kept)",
    },
)

if __name__ == "__main__":
    STAGE.main()

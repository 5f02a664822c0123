"""Release the MAVIS benchmark (MAVIS §3.2, Table 1): VQA instances with their images, the gold
answers' atomic facts and, per fact, the retrieved multimodal documents with the entailment
decisions, plus the human-annotated test split.

`<releases_dir>/<name>/<version>/`: benchmark.duckdb and parquet/ with the tables
- `instances`: one per (question, answer) pair, every shard gathered, ordered by id, with `split`
  (`test`: sampled and fully annotated through the imported sheet; `train` otherwise);
- `questions`: one per post of a released instance;
- `facts`: the kept atomic facts of the released instances, minus the facts annotators judged
  irrelevant (counted in reject_counts as stage `annotation`, reason `irrelevant`), each with its
  instance's `split`;
- `documents`: every document with at least one scored pair (doc_id, modality, source, url, text,
  image_sha256); an image document whose image the image stages dropped has no scored pair and is
  not released. Documents that entail nothing stay, with `entailed` false on all their pairs: the
  release keeps the record, the ground truth is the entailed pairs;
- `fact_documents`: (fact_id, doc_id, rank, query, score, entailed, label): every scored pair of a
  released fact; `label` says who decided: `model` (decide_entailment's threshold), `human` (a
  document an annotator judged: entailed = judged grounded), `not_shown` (an annotated fact's
  document the sheet did not show: not a positive of the test set);
- `images`: (sha256, path `images/<sha256>.jpg`, width, height, url, role question | document)
  of the released questions and image documents, the files copied under images/ (stored PNG, GIF
  or WEBP re-encoded as JPEG so every path ends in .jpg; the name stays the stored sha256);
- `reject_counts`: (stage, reason, rows) over every upstream stage's rejects sidecar (a shared stage
  run under a prefixed rule, e.g. fact_cache_images, counts under the rule's name);
The card's configs load instances and facts as their splits (`test`, `train`) and the other tables
as one split `full` (stages/core/dataset_card.py).
`mavis.jsonl` (one record per instance: question, post body, image paths, gold answer, split and
its facts, each with its positive (entailed) document ids) and a dataset card README.md whose
numbers (Table 1 columns for all and for the test split, counts by domain and by reject reason)
are queried from those tables. The version is a content hash of the inputs and params.

Annotation import (input `annotations`, optional): the filled copy of sample_annotation's sheet,
read with stages/core/review.py: relevant is yes | no | empty (not annotated yet); grounded_k is
yes | no, required for a shown document of a relevant fact. An instance is `test` when every sheet
row of it is decided.
Invariant: instance rows in = instance rows released.
"""
from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image

from stages.core.dataset_card import reject_rows
from stages.core.images import STORED_FORMATS, ImageStore
from stages.core.release import md_table, publish_release, reject_counts
from stages.core.review import read_sheet
from stages.core.stage import Input, Output, Param, Stage, StageError
from stages.core.tables import table_schema

VERSION = "4"  # 4: facts carry their instance's split; the card loads instances and facts by split

FACT_DOCUMENTS = pa.schema([("fact_id", pa.string()), ("doc_id", pa.string()), ("rank", pa.int32()), ("query", pa.string()),
                            ("score", pa.float64()), ("entailed", pa.bool_()), ("label", pa.string())])
IMAGES = pa.schema([("sha256", pa.string()), ("path", pa.string()), ("width", pa.int32()), ("height", pa.int32()),
                    ("url", pa.string()), ("role", pa.string())])
DECISIONS = ("yes", "no")
ANNOTATION_REJECTS = {("annotation", "irrelevant"): "annotators judged the fact irrelevant to the question"}


def read_annotations(path: str, docs_per_fact: int) -> dict[str, dict]:
    """fact_id -> {instance_id, relevant, grounded: {doc_id: bool}} for decided rows; every row's
    instance under "_instances" with whether all its rows are decided."""
    def check(row):
        if row.get("relevant", "") not in ("", *DECISIONS):
            return f"relevant must be yes, no or empty, got {row['relevant']!r}"
        for k in range(1, docs_per_fact + 1):
            value = row.get(f"grounded_{k}", "")
            if value not in ("", *DECISIONS):
                return f"grounded_{k} must be yes, no or empty, got {value!r}"
            if row["relevant"] == "yes" and row.get(f"doc_{k}") and not value:
                return f"grounded_{k} is empty for shown document {row[f'doc_{k}']} of a relevant fact"
        return None

    rows = read_sheet(path, "fact_id", ["instance_id", "relevant"], check)
    decided, complete = {}, collections.defaultdict(lambda: True)
    for row in rows:
        complete[row["instance_id"]] &= row["relevant"] != ""
        if row["relevant"]:
            decided[row["fact_id"]] = {
                "instance_id": row["instance_id"], "relevant": row["relevant"] == "yes",
                "grounded": {row[f"doc_{k}"]: row.get(f"grounded_{k}") == "yes"
                             for k in range(1, docs_per_fact + 1) if row.get(f"doc_{k}")}}
    return {"facts": decided, "test": {i for i, ok in complete.items() if ok}}


def card(name: str, version: str, tables: dict[str, pa.Table]) -> str:
    with duckdb.connect() as con:
        for table_name, table in tables.items():
            con.register(table_name, table)
        con.execute("""create view per_question as
            select i.post_id, i.split, d.modality, count(distinct d.doc_id) as n
            from instances i join facts f on f.instance_id = i.id
            join fact_documents fd on fd.fact_id = f.fact_id and fd.entailed join documents d on d.doc_id = fd.doc_id
            group by 1, 2, 3""")

        def table1(where: str) -> list:
            q, a, words = con.execute(f"select count(distinct post_id), count(*), coalesce(avg(len(string_split(answer, ' '))), 0) "
                                      f"from instances where {where}").fetchone()
            images = con.execute(f"select count(distinct sha256) from images where role = 'question' and sha256 in "
                                 f"(select unnest(image_sha256s) from questions_images where post_id in "
                                 f"(select post_id from instances where {where}))").fetchone()[0]
            docs = dict(con.execute(f"select modality, sum(n) from per_question where post_id in "
                                    f"(select post_id from instances where {where}) group by 1").fetchall())
            facts = con.execute(f"select count(*) from facts where instance_id in (select id from instances where {where})").fetchone()[0]
            per = lambda m: round((docs.get(m) or 0) / q, 1) if q else 0  # noqa: E731
            return [q, images, a, per("text"), per("image"), round(words, 1), facts]

        by_domain = con.execute("select domain, count(distinct post_id), count(*), count(*) filter (where split = 'test') "
                                "from instances group by 1 order by 3 desc, 1").fetchall()
        rejects = con.execute("select stage, reason, rows from reject_counts order by stage, rows desc, reason").fetchall()
        rows = [["all", *table1("true")], ["test (human-annotated)", *table1("split = 'test'")]]
    return "\n\n".join(
        [
            f"# {name} {version}",
            "Long-form visual questions from Reddit image posts with fact-level multimodal citations, built as in "
            "MAVIS §3.2: the post title is the question, the post's images the visual input, every long top-level "
            "comment a gold answer (one instance per answer). Instances a text-only model answers right without the "
            "image are dropped (Tables 7-8); answers are split into relevant, verifiable atomic facts (Tables 9-10); "
            "each fact retrieved web images and C4 passages with the fact as the query, and an entailment model kept "
            "the documents that ground it (App. A.3, Table 2). The `test` split is the human-annotated sample (§3.2 "
            "Step 3); every other instance is `train`, its ground truth the entailment model's decisions. Built by citeforge; query with `duckdb benchmark.duckdb`; `mavis.jsonl` holds one record per instance.",
            "## Statistics (MAVIS Table 1 columns)",
            "D_T/Q and D_I/Q count the distinct entailed text and image documents per question.",
            md_table(["split", "Q", "I", "A", "D_T/Q", "D_I/Q", "answer length (words)", "facts"], rows),
            "## Instances by domain (MAVIS Table 11)",
            md_table(["domain", "questions", "answers", "test"], [list(r) for r in by_domain]),
            "## Rows dropped, by stage and reason",
            md_table(["stage", "reason", "rows", "meaning"], reject_rows(rejects, ANNOTATION_REJECTS)) if rejects else "None.",
            "## Tables",
            md_table(["table", "rows"], [[t, tables[t].num_rows] for t in tables if t != "questions_images"]),
        ]
    ) + "\n"


def copy_images(folder: Path, store: ImageStore, images: pa.Table) -> None:
    """Each image once as `images/<sha256>.jpg`, the others re-encoded as JPEG, in threads (Pillow
    and the copy release the GIL; a release holds hundreds of thousands of images)."""
    (folder / "images").mkdir()

    def copy(sha: str) -> None:
        source = store.find(sha)
        if source is None:
            raise StageError(f"image {sha} is not in the image store {store.root}")
        target = folder / "images" / f"{sha}.jpg"
        if source.suffix.lower() in (".jpg", ".jpeg"):
            shutil.copyfile(source, target)
        else:
            with Image.open(source, formats=STORED_FORMATS) as im:
                im.convert("RGB").save(target, "JPEG", quality=95)

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(copy, sorted(set(images.column("sha256").to_pylist()))))  # the first failure stops the stage


def write_jsonl(folder: Path, tables: dict[str, pa.Table]) -> None:
    positives = collections.defaultdict(list)
    pairs = tables["fact_documents"]  # tens of millions of pairs at real scale: only the entailed ones as Python rows
    for row in pairs.filter(pc.equal(pairs["entailed"], True)).select(["fact_id", "doc_id"]).to_pylist():
        positives[row["fact_id"]].append(row["doc_id"])
    facts = collections.defaultdict(list)
    for fact in tables["facts"].to_pylist():
        facts[fact["instance_id"]].append({"fact_id": fact["fact_id"], "sentence": fact["sentence"], "text": fact["text"],
                                           "positive_doc_ids": sorted(positives[fact["fact_id"]])})
    images = {r["post_id"]: r["image_sha256s"] for r in tables["questions_images"].to_pylist()}
    with open(folder / "mavis.jsonl", "w", encoding="utf-8") as fh:
        for row in tables["instances"].to_pylist():
            record = {k: row[k] for k in ("id", "post_id", "domain", "subreddit", "question", "body", "image_urls", "answer",
                                          "permalink", "split")}
            record["images"] = [f"images/{sha}.jpg" for sha in images.get(row["post_id"]) or []]
            record["facts"] = facts[row["id"]]
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def _reject_counts_by_rule(ctx) -> pa.Table:
    """Every rejects sidecar counted (stage, reason, rows), a file's stage named after its rule
    when a family runs a shared stage under a prefixed rule (the fact images'
    `fact_cache_images` folder holds cache_images' rejects), so the post and the fact images
    count apart. Counted a batch at a time: a monthly dump's harvest rejects hundreds of millions
    of records. A row that breaks the rejects contract (a null stage) is this stage's reject."""
    counts = ctx.count_rows("rejects", ["stage", "reason"])
    files, stages = counts["file"].to_pylist(), counts["stage"].to_pylist()
    stages_of = collections.defaultdict(set)
    for path, stage in zip(files, stages):
        stages_of[path].add(stage)
    rule_of = {}
    for path, names in stages_of.items():
        folder, (stage, *others) = Path(path).parent.name, sorted(names)
        if not others and folder.endswith("_" + stage):  # a prefixed rule running a shared stage
            rule_of[path] = folder
    named = pa.array([rule_of.get(path, stage) for path, stage in zip(files, stages)], pa.string())
    return reject_counts(counts.set_column(counts.schema.get_field_index("stage"), "stage", named))


def run(ctx):
    p = ctx.params
    raw = ctx.read("instances").sort_by("id")
    ctx.add_input(raw.num_rows)
    notes = read_annotations(ctx.input_path("annotations"), p["docs_per_fact"]) if ctx.has_input("annotations") else {"facts": {}, "test": set()}
    decided = notes["facts"]
    irrelevant = [(f, d["instance_id"]) for f, d in decided.items() if not d["relevant"]]
    human = [(f, doc, ok) for f, d in decided.items() if d["relevant"] for doc, ok in d["grounded"].items()]
    with duckdb.connect() as con:
        con.register("raw_instances", raw)
        con.register("test_ids", pa.table({"id": pa.array(sorted(notes["test"]), pa.string())}))
        instances = con.sql("select *, case when id in (select id from test_ids) then 'test' else 'train' end as split "
                                "from raw_instances order by id").to_arrow_table()
        con.register("instances", instances)
        con.register("all_questions", ctx.read("questions"))
        questions = con.sql("select * from all_questions where id in (select post_id from instances) order by id").to_arrow_table()
        con.register("all_facts", ctx.read("facts"))
        con.register("irrelevant", pa.table({"fact_id": pa.array([f for f, _ in irrelevant], pa.string())}))
        facts = con.sql("select f.*, i.split from all_facts f join instances i on i.id = f.instance_id "
                            "where f.fact_id not in (select fact_id from irrelevant) order by f.fact_id").to_arrow_table()
        con.register("facts", facts)
        con.register("judged", ctx.read("judged"))
        con.register("human", pa.table({"fact_id": pa.array([h[0] for h in human], pa.string()),
                                        "doc_id": pa.array([h[1] for h in human], pa.string()),
                                        "grounded": pa.array([h[2] for h in human], pa.bool_())}))
        con.register("annotated", pa.table({"fact_id": pa.array(sorted(decided), pa.string())}))
        fact_documents = con.sql("""
            select j.fact_id, j.doc_id, j.rank, j.query, j.score,
                   case when h.grounded is not null then h.grounded
                        when j.fact_id in (select fact_id from annotated) then false else j.entailed end as entailed,
                   case when h.grounded is not null then 'human'
                        when j.fact_id in (select fact_id from annotated) then 'not_shown' else 'model' end as label
            from judged j left join human h on h.fact_id = j.fact_id and h.doc_id = j.doc_id
            where j.fact_id in (select fact_id from facts) order by j.fact_id, j.modality, j.rank, j.doc_id""").to_arrow_table()
        con.register("fact_documents", fact_documents.cast(FACT_DOCUMENTS))
        con.register("all_documents", ctx.read("documents"))
        con.register("doc_images", ctx.read("document_images"))
        con.register("post_images", ctx.read("question_images"))
        # an image document's sha256: its url as cached for a fact that retrieved it (one url, one file)
        documents = con.sql("""
            with shas as (
              select fd.doc_id, min(di.sha256) as sha256 from fact_documents fd
              join (select distinct doc_id, url from all_documents where modality = 'image') d on d.doc_id = fd.doc_id
              join doc_images di on di.owner_id = fd.fact_id and di.url = d.url group by 1)
            select distinct on (d.doc_id) d.doc_id, d.modality, d.source, d.url, d.text,
                   coalesce(d.image_sha256, s.sha256) as image_sha256
            from all_documents d left join shas s on s.doc_id = d.doc_id
            where d.doc_id in (select doc_id from fact_documents) order by d.doc_id""").to_arrow_table()
        con.register("documents", documents)
        questions_images = con.sql("""
            select owner_id as post_id, list(sha256 order by position) as image_sha256s from post_images
            where owner_id in (select post_id from instances) group by 1""").to_arrow_table()
        images = con.sql("""
            select distinct on (sha256, role) sha256, 'images/' || sha256 || '.jpg' as path, width, height, url, role from (
              select sha256, width, height, url, 'question' as role, position as o from post_images
                where owner_id in (select post_id from instances)
              union all
              select di.sha256, di.width, di.height, di.url, 'document', di.position from doc_images di
                join documents d on d.image_sha256 = di.sha256 and d.url = di.url)
            order by sha256, role, url""").to_arrow_table().cast(IMAGES)
    counts = _reject_counts_by_rule(ctx)
    if irrelevant:
        counts = pa.concat_tables([counts, pa.table({"stage": ["annotation"], "reason": ["irrelevant"],
                                                     "rows": pa.array([len(irrelevant)], pa.int64())})])
    tables = {"instances": instances, "questions": questions, "facts": facts, "documents": documents.cast(table_schema("mavis_documents")),
              "fact_documents": fact_documents.cast(FACT_DOCUMENTS), "images": images, "reject_counts": counts}
    ctx.stats["test_instances"] = len(notes["test"] & set(raw.column("id").to_pylist()))
    store = ImageStore(p["image_store"])
    make_card = lambda name, version: card(name, version, {**tables, "questions_images": questions_images})  # noqa: E731

    def extra(folder: Path) -> None:
        copy_images(folder, store, images)
        write_jsonl(folder, {**tables, "questions_images": questions_images})

    publish_release(ctx, tables, make_card, extra, unsplit="full")  # instances and facts: test | train; the rest serves both


STAGE = Stage(
    name="release_mavis",
    version=VERSION,
    doc=__doc__,
    inputs={
        "instances": Input("reddit_instances shards: the instances to release", many=True, table="reddit_instances"),
        "questions": Input("reddit_questions shards: the posts the instances ask about", many=True, table="reddit_questions"),
        "facts": Input("mavis_facts shards: the kept atomic facts", many=True, optional=True, table="mavis_facts"),
        "documents": Input("mavis_documents shards: the retrieved documents", many=True, optional=True, table="mavis_documents"),
        "judged": Input("mavis_judged_documents: scored pairs with the entailment decision", many=True, optional=True,
                        table="mavis_judged_documents"),
        "question_images": Input("the posts' images (images_cached, or the optional filters' output; owner = post)", many=True,
                                 optional=True, table="images_cached"),
        "document_images": Input("the fact images as filter_entailment_image read them (images_cached, or the optional "
                                 "filters' output; owner = fact)", many=True, optional=True, table="images_cached"),
        "annotations": Input("filled-in annotation sheet of sample_annotation (CSV)", optional=True, kind="file"),
        "rejects": Input("rejects sidecars of the family's stages, counted in the card", many=True, optional=True, table="rejects"),
    },
    outputs={"manifest": Output(None, "release manifest JSON: name, version, path, table rows")},
    params={
        "name": Param(str, help="release name: data/releases/<name>/<version>/", pattern=Param.PLAIN_NAME),
        "releases_dir": Param(str, "data/releases", "where releases land", folder="writes"),
        "image_store": Param(str, "data/cache/images", "image store root the images are copied from", folder="reads"),
        "docs_per_fact": Param(int, 3, "grounded_k columns of the annotation sheet (sample_annotation.docs_per_fact)", min=1),
    },
    run=run,
    rejects={},
)

if __name__ == "__main__":
    STAGE.main()

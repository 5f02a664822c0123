"""Release the MAVIS Reddit family (MAVIS §3.2): the VQA instances, their questions and the gold
answers' atomic facts as a benchmark folder.

`<releases_dir>/<name>/<version>/`: benchmark.duckdb with the tables `instances` (one per
(question, answer) pair, every shard gathered, ordered by id), `questions` (one per post),
`facts` (the kept atomic facts of the released instances, when the `facts` input is given) and
`reject_counts` (stage, reason, rows: what the harvest and the filters dropped and why), the same
tables under parquet/, `mavis.jsonl` (one record per instance: question, post body, image urls,
gold answer, its facts) and a dataset card README.md whose numbers (Table 1 columns, counts by
domain and by reject reason) are queried from those tables. The version is a content hash of the
inputs and params: an identical rebuild lands in the same folder.

Invariant: instance rows in = instance rows released (questions and facts are restricted to the
released instances; facts of instances dropped later are not released).
"""
from __future__ import annotations

import json

import duckdb
import pyarrow as pa

from stages.core.release import md_table, publish_release, reject_counts
from stages.core.stage import Input, Output, Param, Stage
from stages.core.tables import table_schema

VERSION = "2"


def card(name: str, version: str, tables: dict[str, pa.Table]) -> str:
    with duckdb.connect() as con:
        for table_name, table in tables.items():
            con.register(table_name, table)
        by_domain = con.execute(
            "select domain, count(distinct post_id), count(*) from instances group by 1 order by 3 desc, 1").fetchall()
        stats = con.execute(
            "select count(distinct post_id), count(*), coalesce(avg(len(string_split(answer, ' '))), 0) from instances").fetchone()
        images = con.execute("select coalesce(sum(len(image_urls)), 0) from questions").fetchone()[0]
        facts = con.execute("select count(*), count(distinct instance_id) from facts").fetchone()
        rejects = con.execute("select stage, reason, rows from reject_counts order by stage, rows desc, reason").fetchall()
    return "\n\n".join(
        [
            f"# {name} {version}",
            "Long-form visual questions from Reddit image posts, built as in MAVIS §3.2: the post title is the "
            "question (starts with a question word, ends with '?'), the post's images are the visual input, and "
            "every top-level comment of over 500 characters and 3+ sentences is a gold answer (one instance per "
            "answer). Instances a text-only model answers right without the image are dropped (Tables 7-8); "
            "answers are split into atomic facts, kept when relevant to the question and verifiable (Tables 9-10). "
            "Built by citeforge; query with `duckdb benchmark.duckdb`; `mavis.jsonl` holds one record per instance.",
            "## Statistics (MAVIS Table 1 columns)",
            md_table(["questions", "images", "answers", "avg answer words", "facts", "instances with facts"],
                     [[stats[0], images, stats[1], round(stats[2], 1), facts[0], facts[1]]]),
            "## Instances by domain (MAVIS Table 11)",
            md_table(["domain", "questions", "answers"], [list(r) for r in by_domain]),
            "## Rows dropped, by stage and reason",
            md_table(["stage", "reason", "rows"], [list(r) for r in rejects]) if rejects else "None.",
            "## Tables",
            md_table(["table", "rows"], [[t, tables[t].num_rows] for t in tables]),
        ]
    ) + "\n"


def write_jsonl(folder, instances: pa.Table, facts: pa.Table) -> None:
    by_instance: dict[str, list[dict]] = {}
    for fact in facts.to_pylist():
        by_instance.setdefault(fact["instance_id"], []).append(
            {"fact_id": fact["fact_id"], "sentence": fact["sentence"], "text": fact["text"]})
    with open(folder / "mavis.jsonl", "w", encoding="utf-8") as fh:
        for row in instances.to_pylist():
            record = {k: row[k] for k in ("id", "post_id", "domain", "subreddit", "question", "body", "image_urls", "answer", "permalink")}
            record["facts"] = by_instance.get(row["id"], [])
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def run(ctx):
    instances = ctx.read("instances").sort_by("id")
    ctx.add_input(instances.num_rows)
    with duckdb.connect() as con:
        con.register("instances", instances)
        con.register("all_questions", ctx.read("questions"))
        questions = con.execute(
            "select * from all_questions where id in (select post_id from instances) order by id").to_arrow_table()
        facts = table_schema("mavis_facts").empty_table()
        if ctx.has_input("facts"):
            con.register("all_facts", ctx.read("facts"))
            facts = con.execute(
                "select * from all_facts where instance_id in (select id from instances) order by fact_id").to_arrow_table()
    tables = {"instances": instances, "questions": questions, "facts": facts,
              "reject_counts": reject_counts(ctx.read("rejects"))}
    publish_release(ctx, tables, lambda name, version: card(name, version, tables),
                    lambda folder: write_jsonl(folder, instances, facts))


STAGE = Stage(
    name="release_mavis",
    version=VERSION,
    doc=__doc__,
    inputs={
        "instances": Input("reddit_instances shards: the instances to release", many=True, table="reddit_instances"),
        "questions": Input("reddit_questions shards: the posts the instances ask about", many=True, table="reddit_questions"),
        "facts": Input("mavis_facts shards: the kept atomic facts", many=True, optional=True, table="mavis_facts"),
        "rejects": Input("rejects sidecars of the family's stages, counted in the card", many=True, optional=True, table="rejects"),
    },
    outputs={"manifest": Output(None, "release manifest JSON: name, version, path, table rows")},
    params={
        "name": Param(str, help="release name: data/releases/<name>/<version>/", pattern=Param.PLAIN_NAME),
        "releases_dir": Param(str, "data/releases", "where releases land"),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()

"""Release the MAVIS Reddit family: the Step 1 VQA instances (MAVIS §3.2) as a benchmark folder.

`<releases_dir>/<name>/<version>/`: benchmark.duckdb with the tables `questions` (every shard
gathered, ordered by id) and `reject_counts` (stage, reason, rows: what the harvest and the
filters dropped and why), the same tables under parquet/, and a dataset card README.md whose
counts (by domain, by reject reason) are queried from those tables. The version is a content hash
of the inputs and params: an identical rebuild lands in the same folder.

Invariant: question rows in = question rows released.
"""
from __future__ import annotations

import duckdb
import pyarrow as pa

from stages.core.release import md_table, publish_release, reject_counts
from stages.core.stage import Input, Output, Param, Stage

VERSION = "1"


def card(name: str, version: str, tables: dict[str, pa.Table]) -> str:
    with duckdb.connect() as con:
        for table_name, table in tables.items():
            con.register(table_name, table)
        by_domain = con.execute("select domain, count(*) from questions group by 1 order by 2 desc, 1").fetchall()
        images = con.execute("select coalesce(sum(len(image_urls)), 0), count(*) filter (where len(image_urls) > 1) from questions").fetchone()
        rejects = con.execute("select stage, reason, rows from reject_counts order by stage, rows desc, reason").fetchall()
        total = con.execute("select count(*) from questions").fetchone()[0]
    return "\n\n".join(
        [
            f"# {name} {version}",
            "Long-form visual questions from Reddit image posts, built as in MAVIS §3.2 Step 1: the post "
            "title is the question (starts with a question word, ends with '?'), the post's images are the "
            "visual input, and the highest-scored top-level comment of over 500 characters and 3+ sentences is "
            "the answer. Built by citeforge; query with `duckdb benchmark.duckdb`.",
            f"**{total} questions**, {images[0]} images, {images[1]} gallery questions.",
            "## Questions by domain (MAVIS Table 11)",
            md_table(["domain", "questions"], [list(r) for r in by_domain]),
            "## Rows dropped, by stage and reason",
            md_table(["stage", "reason", "rows"], [list(r) for r in rejects]) if rejects else "None.",
            "## Tables",
            md_table(["table", "rows"], [[t, tables[t].num_rows] for t in tables]),
        ]
    ) + "\n"


def run(ctx):
    questions = ctx.read("questions")
    ctx.add_input(questions.num_rows)
    questions = questions.sort_by("id")
    tables = {"questions": questions, "reject_counts": reject_counts(ctx.read("rejects"))}
    publish_release(ctx, tables, lambda name, version: card(name, version, tables))


STAGE = Stage(
    name="release_mavis",
    version=VERSION,
    doc=__doc__,
    inputs={
        "questions": Input("reddit_questions shards", many=True, table="reddit_questions"),
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

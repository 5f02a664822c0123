"""The dataset card's YAML front matter: what `datasets.load_dataset(<release folder>)` reads.

Every release folder's README.md starts with a YAML block naming one config per non-empty table,
the table's features (from the Parquet schema, so `datasets` loads the columns with the types the
release wrote), a license placeholder and the seed paper to cite. `publish_release` writes it for
every family. A config's splits are the splits its data holds: a table with a `split` column (MAVIS
instances and facts: `test` is the human-annotated sample, §3.2 Step 3, `train` the rest) is one
split per value, each its own file `splits/<table>/<split>.parquet` (`parquet/<table>.parquet`
keeps every row); any other table is one split, named by the release (`test` for MCiteBench and
M2RAG, whose every row is evaluation data; MAVIS's shared tables, `full`):

    datasets.load_dataset("data/releases/mavis-reddit/<version>", "instances", split="test")

Uploading a release is `scripts/push_release.py` (token from the environment; never run by tests).

A card's table of dropped rows prints beside each counted reject reason the meaning its stage
declares (`reject_rows`), read from the stage manifest, schemas/stages.yaml, without importing a stage.
"""
from __future__ import annotations

import pyarrow as pa
import yaml

from .declarations import declared_meaning, load_manifest

# Placeholder until a release's sources are cleared: a Hub card accepts it, and people see that
# the license is still to be decided (Reddit posts, OpenReview discussions and web pages carry
# their authors' terms).
LICENSE_PLACEHOLDER = "unknown"

# The seed paper each release stage reproduces (titles and authors as the seed papers print them).
SEED_CITATIONS = {
    "release_mavis": """@misc{song_mavis,
  title  = {MAVIS: A Benchmark for Multimodal Source Attribution in Long-form Visual Question Answering},
  author = {Song, Seokwon and Park, Minsu and Kim, Gunhee},
}""",
    "release_mcitebench": """@misc{hu_mcitebench,
  title  = {MCiteBench: A Multimodal Benchmark for Generating Text with Citations},
  author = {Hu, Caiyu and Zhang, Yikai and Zhu, Tinghui and Ye, Yiwei and Xiao, Yanghua},
}""",
    "release_m2rag": """@misc{ma_m2rag,
  title  = {Multi-modal Retrieval Augmented Multi-modal Generation: A Benchmark, Evaluate Metrics and Strong Baselines},
  author = {Ma, Zi-Ao and Lan, Tian and Tu, Rong-Cheng and Hu, Yong and Huang, Heyan and Mao, Xian-Ling},
}""",
}


def reject_meaning(stage: str, reason: str) -> str:
    """The meaning `stage` declares for `reason` ("" when none does). A shared stage counted under
    its rule's name (fact_cache_images: cache_images run for the facts) has its stage's reasons."""
    manifest = load_manifest()
    entry = manifest.get(stage) or next((manifest[name] for name in sorted(manifest, key=len, reverse=True)
                                         if stage.endswith("_" + name)), None)
    return (declared_meaning(entry["rejects"], reason) or "") if entry else ""


def reject_rows(counts, extra: dict[tuple[str, str], str] | None = None) -> list[list]:
    """[stage, reason, rows, meaning] for each counted (stage, reason, rows); `extra` gives the
    meaning of a count that is no stage's reject (release_mavis's annotators' `irrelevant`)."""
    extra = extra or {}
    return [[stage, reason, rows, extra.get((stage, reason)) or reject_meaning(stage, reason)] for stage, reason, rows in counts]


def features(schema: pa.Schema) -> list:
    """The card's `features` list for a table, in the layout `datasets` writes and reads."""
    from datasets import Features  # imported when a release is written, not when a stage parses

    return Features.from_arrow_schema(schema)._to_yaml_list()


def splits_of(table: pa.Table) -> list[str]:
    """The split values of a table with a string `split` column (test first), else []."""
    if "split" not in table.column_names or not pa.types.is_string(table.schema.field("split").type):
        return []
    values = {v for v in table.column("split").to_pylist() if v}
    return sorted(values, key=lambda v: (v != "test", v))


def split_files(tables: dict[str, pa.Table]) -> dict[str, dict[str, pa.Table]]:
    """table -> split -> its rows, for the tables that hold splits (written as splits/<table>/<split>.parquet)."""
    import pyarrow.compute as pc

    return {name: {split: t.filter(pc.equal(t.column("split"), split)) for split in splits_of(t)}
            for name, t in tables.items() if splits_of(t)}


def front_matter(name: str, tables: dict[str, pa.Table], unsplit: str = "test") -> str:
    """The YAML block: one config per table (the first is the default), its splits, its features,
    the license. An empty table gets no config: `datasets` cannot build a split from a file with no
    rows. `unsplit` names the one split of a table without a `split` column."""
    loadable = {table: t for table, t in tables.items() if t.num_rows}
    split = split_files(loadable)

    def data_files(table: str) -> list[dict]:
        if table in split:
            return [{"split": s, "path": f"splits/{table}/{s}.parquet"} for s in split[table]]
        return [{"split": unsplit, "path": f"parquet/{table}.parquet"}]

    meta = {
        "pretty_name": name,
        "license": LICENSE_PLACEHOLDER,
        "configs": [
            {"config_name": table, "data_files": data_files(table), **({"default": True} if i == 0 else {})}
            for i, table in enumerate(loadable)
        ],
        "dataset_info": [{"config_name": table, "features": features(t.schema)} for table, t in loadable.items()],
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n\n"


def citation_section(stage: str, tables: dict[str, pa.Table], unsplit: str = "test") -> str:
    """The card's closing sections: how to load it (each config's splits and rows), the seed
    paper's BibTeX, the license to decide."""
    empty = [table for table, t in tables.items() if not t.num_rows]
    split = split_files(tables)
    configs = [f"`{table}` ({', '.join(f'{s}: {len(rows)}' for s, rows in split[table].items())})" if table in split
               else f"`{table}` ({unsplit}: {t.num_rows})" for table, t in tables.items() if t.num_rows]
    load = ("\n\n## Loading\n\nEach table is a config of this folder: `datasets.load_dataset(\"<this folder>\", \"<table>\", "
            "split=\"<split>\")`; configs and their splits (rows): " + ", ".join(configs) + ". `benchmark.duckdb` and "
            "`parquet/` hold the same tables whole."
            + (f" Empty in this release, so not a config: {', '.join(empty)}." if empty else "") + "\n")
    bibtex = SEED_CITATIONS.get(stage)
    cite = f"Cite the seed paper this release reproduces:\n\n```bibtex\n{bibtex}\n```\n" if bibtex else "Cite the seed paper this release reproduces.\n"
    return (f"{load}\n## Citation\n\n{cite}\n## License\n\n`{LICENSE_PLACEHOLDER}` is a placeholder: set it to the terms of the "
            "release's sources before publishing it.\n")

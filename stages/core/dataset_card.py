"""The dataset card's YAML front matter: what `datasets.load_dataset(<release folder>)` reads.

Every release folder's README.md starts with a YAML block naming one config per non-empty table
(its Parquet file under parquet/, as the `test` split: these are benchmarks), the table's features
(from the Parquet schema, so `datasets` loads the columns with the types the release wrote), a
license placeholder and the seed paper to cite. `publish_release` writes it for every family:

    datasets.load_dataset("data/releases/mavis-reddit/<version>", "instances", split="test")

Uploading a release is `scripts/push_release.py` (token from the environment; never run by tests).
"""
from __future__ import annotations

import pyarrow as pa
import yaml

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


def features(schema: pa.Schema) -> list:
    """The card's `features` list for a table, in the layout `datasets` writes and reads."""
    from datasets import Features  # imported when a release is written, not when a stage parses

    return Features.from_arrow_schema(schema)._to_yaml_list()


def front_matter(name: str, tables: dict[str, pa.Table]) -> str:
    """The YAML block: one config per table (the first is the default), its features, the license.
    An empty table gets no config: `datasets` cannot build a split from a file with no rows."""
    loadable = {table: t for table, t in tables.items() if t.num_rows}
    meta = {
        "pretty_name": name,
        "license": LICENSE_PLACEHOLDER,
        "configs": [
            {"config_name": table, "data_files": [{"split": "test", "path": f"parquet/{table}.parquet"}], **({"default": True} if i == 0 else {})}
            for i, table in enumerate(loadable)
        ],
        "dataset_info": [{"config_name": table, "features": features(t.schema)} for table, t in loadable.items()],
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n\n"


def citation_section(stage: str, tables: dict[str, pa.Table]) -> str:
    """The card's closing sections: how to load it, the seed paper's BibTeX, the license to decide."""
    empty = [table for table, t in tables.items() if not t.num_rows]
    load = ("\n\n## Loading\n\nEach table is a config of this folder: `datasets.load_dataset(\"<this folder>\", \"<table>\", "
            "split=\"test\")`; `benchmark.duckdb` holds the same tables."
            + (f" Empty in this release, so not a config: {', '.join(empty)}." if empty else "") + "\n")
    bibtex = SEED_CITATIONS.get(stage)
    cite = f"Cite the seed paper this release reproduces:\n\n```bibtex\n{bibtex}\n```\n" if bibtex else "Cite the seed paper this release reproduces.\n"
    return (f"{load}\n## Citation\n\n{cite}\n## License\n\n`{LICENSE_PLACEHOLDER}` is a placeholder: set it to the terms of the "
            "release's sources before publishing it.\n")

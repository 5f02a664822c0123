"""Config validation against `schemas/config.schema.yaml` before any job runs (the Snakefile
calls it; no stage imports this module, so editing it reruns nothing).

The top-level schema holds the run-wide keys and `$ref`s one schema per section
(`schemas/config/<section>.schema.yaml`). A family section's stage subsections are named after
the stage they feed and generated from that stage's `Param` declarations
(`python -m stages.core.config_schema --write`), so a setting's type, range and choices are
written once. Every object sets `additionalProperties: false`, so a typo'd key fails naming its
full path; a key of the old layout fails naming its new name.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from .schema_check import SCHEMAS, read_exponent_numbers, schema_errors

# Config keys of the old layout -> their names now (sections are named after the stage they feed);
# a key that now lives in several stages' sections maps to all of them.
RENAMED: dict[str, str | tuple[str, ...]] = {
    "mavis.pushshift": "mavis.harvest_pushshift",
    "mavis.filter": "mavis.filter_questions",
    "mavis.release": "mavis.release_mavis",
    "images.cache": "images.cache_images",
    "images.filter": "images.filter_images",
    "images.dedup": "images.phash_dedup",
    "m2rag.harvest": "m2rag.harvest_hub_dataset",
    "m2rag.filter": "m2rag.filter_queries",
    "m2rag.classify": "m2rag.classify_queries",
    "m2rag.release": "m2rag.release_m2rag",
    "mcitebench.openreview": "mcitebench.harvest_openreview",
    "mcitebench.parse": "mcitebench.parse_pdfs",
    "mcitebench.explanation_qa": "mcitebench.extract_explanation_qa",
    "mcitebench.locating_qa": "mcitebench.generate_locating_qa",
    "mcitebench.pairing": "mcitebench.pair_evidence",
    "mcitebench.distractors": "mcitebench.sample_distractors",
    "mcitebench.release": "mcitebench.release_mcitebench",
    "evaluate": "eval_mcitebench",  # the MCiteBench evaluation, named like the other evaluations
    "retrieval.replay_warcs": "fetch.replay_warcs",  # one list of replayed WARCs for every fetching stage
    "mcitebench.parse_pdfs.image_store": "images.store",  # one image store for the run
    "citeeval.input_model": "citeeval.citeeval_prepare.model",
    "citeeval.limit": "citeeval.citeeval_prepare.limit",
    "citeeval.min_statement_chars": "citeeval.citeeval_prepare.min_statement_chars",
    "citeeval.max_tokens": ("citeeval.citeeval_context.max_tokens", "citeeval.citeeval_itercoe.max_tokens"),
    "citeeval.editdist": "citeeval.citeeval_editdist",
    "citeeval.fit": "citeeval.citeeval_fit",
    "citeeval.human_ratings": "citeeval.citeeval_score.human_ratings",
    "citeeval.title": "citeeval.citeeval_report.title",
}


class ConfigError(ValueError):
    pass


def validate_config(config: dict, schemas: Path = SCHEMAS) -> None:
    """Raise ConfigError naming every bad key (dotted path) and why, one line each. A number
    written with an exponent (`1e-5`), which YAML 1.1 reads as text, is first made the number."""
    schema = yaml.safe_load((schemas / "config.schema.yaml").read_text())
    read_exponent_numbers(schema, config, schemas, base=None)
    lines = []
    for where, problem, keyword in schema_errors(schema, config, schemas, base=None):
        key = where.lstrip(".") or "<top level>"
        if keyword == "additionalProperties" and key in RENAMED:
            new = RENAMED[key]
            names = " and ".join(f"'{name}'" for name in ((new,) if isinstance(new, str) else new))
            lines.append(f"config key '{key}' was renamed to {names}")
        elif keyword == "additionalProperties":
            lines.append(f"unknown config key '{key}' {problem.removeprefix('is unknown ')}")
        else:
            lines.append(f"config key '{key}' {problem}")
    if lines:  # a section reached by two schema paths reports its problem twice: once is enough
        raise ConfigError("invalid config:\n  " + "\n  ".join(dict.fromkeys(lines)))

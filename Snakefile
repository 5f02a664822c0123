# citeforge: raw sources -> benchmark releases -> evaluations. See README.md and DESIGN.md.
#   snakemake --cores 2 release      build every enabled family's release (default target)
#   snakemake --cores 2 catalog      data/runs/<run>/catalog.duckdb over every stage output
#   snakemake --cores 2 evaluate     run the configured models on the releases and score them
#   snakemake --cores 2 report && snakemake report --report report.html   Snakemake's HTML report
import os
import sys

from stages.core.config import ConfigError, validate_config

configfile: "config/config.yaml"

try:
    validate_config(config)  # fails before any job runs, naming the bad key
except ConfigError as err:
    sys.exit(str(err))  # the message alone: one line per bad key, no traceback

include: "rules/common.smk"
include: "rules/mavis.smk"
include: "rules/images.smk"
include: "rules/retrieval.smk"
include: "rules/m2rag.smk"
include: "rules/openreview.smk"
include: "rules/mcitebench.smk"
include: "rules/eval_mcitebench.smk"
include: "rules/eval_mavis.smk"
include: "rules/citeeval.smk"
include: "rules/eval_m2rag.smk"
include: "rules/attribution.smk"
include: "rules/report.smk"


rule release:
    default_target: True
    input:
        lambda w: RELEASES,
        CATALOG_FILE,


rule catalog:
    input:
        CATALOG_FILE,


rule evaluate:  # and the catalog over the evaluation tables it made (catalog_evaluations)
    input:
        lambda w: EVALUATIONS,
        CATALOG_FILE,


rule report:  # then `snakemake report --report report.html` (add `evaluate` to both for the evaluations)
    input:
        lambda w: RELEASES,
        CATALOG_FILE,
        lambda w: REPORTS,


onsuccess:
    for manifest in RELEASES:
        if Path(manifest).exists():
            print(f"release: {os.path.relpath(json.loads(Path(manifest).read_text())['path'])}")
    for report in EVALUATIONS:
        if Path(report).exists():
            print(f"evaluation report: {report}")
    if Path(CATALOG_FILE).exists():
        print(f"catalog: {CATALOG_FILE}  (duckdb {CATALOG_FILE} \"show all tables\")")

# citeforge: raw sources -> benchmark releases -> evaluations. See README.md ("Architecture").
#   snakemake --cores 2 release      build every enabled family's release (default target)
#   snakemake --cores 2 catalog      data/runs/<run>/catalog.duckdb over every stage output
#   snakemake --cores 2 evaluate     run the configured models on the releases and score them
#   snakemake --cores 2 report && snakemake report --report report.html   Snakemake's HTML report
#   snakemake --cores 2 estimate --configfile <recipe>   a run's model calls and their cost, running only free steps
#   python -m stages.core.explain --configfile <recipe>   every rule's params and where they come from
import json
import os
import sys
from pathlib import Path

from stages.core.config import ConfigError, validate_config
from stages.core.estimate import last_estimate, over_budget
from stages.core.wiring import WiringError, load_steps

# run-wide defaults and the papers' shared tables; the demo's caps only when no recipe is given
configfile: "config/config.yaml"
if not workflow.overwrite_configfiles:
    configfile: "config/demo.yaml"

try:
    validate_config(config)  # fails before any job runs, naming the bad key
except ConfigError as err:
    sys.exit(str(err))  # the message alone: one line per bad key, no traceback

try:  # each rules/<family>.smk declares its family's steps (plain Python, read in a namespace of its own)
    # the targets as a function: Snakemake sets them after reading this file (the catalog's inputs read them)
    W = load_steps(config, targets=lambda: workflow.dag_settings.targets if workflow.dag_settings else ())
except WiringError as err:
    sys.exit(f"wiring: {err}")  # a rule file and a stage declaration disagree: one line, naming the rule

include: "rules/steps.smk"

rule release:
    default_target: True
    input:
        W.releases,
        W.catalog,
        # Every stage output, not only the end products: Snakemake rebuilds a missing intermediate
        # file only when a job it runs needs it. A rerun (--forcerun, a changed rule) deletes the
        # job's outputs before it starts; killed then, the job leaves none (a stage commits all or
        # none), its incomplete marker names files that do not exist (--rerun-incomplete only
        # takes existing ones), and the older downstream outputs looked up to date.
        W.catalog_tables("build"),


rule catalog:
    input:
        W.catalog,


rule evaluate:  # and the catalog over the evaluation tables it made (rules/catalog.smk)
    input:
        W.evaluations,
        W.catalog,


rule estimate:  # the model steps' calls, tokens and cost, after running only the free steps (README "Real run")
    input:
        W.steps["estimate_cost"].output("table"),
    localrule: True
    run:  # a rule with no output runs on every call: the table is printed each time (onstart checks it is this run's)
        print(Path(input[0]).read_text())


rule report:  # then `snakemake report --report report.html` (add `evaluate` to both for the evaluations)
    input:
        W.releases,
        W.catalog,
        W.reports,


onstart:
    # estimate.budget, checked once the DAG is known and before any job starts, against the last
    # `snakemake estimate` of the same settings: a model step that would run and costs more stops the
    # run here (the projection needs the whole DAG's counts, which only the estimate has; a check
    # inside a job would see one shard, after the steps before it had spent). Dry runs skip hooks.
    _running = {job.rule.name for job in workflow.dag.needrun_jobs()}
    if W.get("estimate.budget") is not None:
        _over = over_budget(W, W.get("estimate.budget"), _running)
        if _over:
            sys.exit(_over)
    # Snakemake keeps an estimate it will not remake (its steps cannot run for a missing input, or
    # it looks up to date by other triggers) as if it were a source file: it must not pass for this run's
    if "estimate" in workflow.dag_settings.targets and "estimate_cost" not in _running:
        _, _, _stale = last_estimate(W)
        if _stale:
            _table = W.steps["estimate_cost"].output("table")
            sys.exit(f"estimate: {_stale}, and Snakemake will not remake it: `snakemake -n {_table}` with the same "
                     "--configfile names an input it lacks; if none is missing, add --forcerun estimate_cost")


onsuccess:
    for manifest in W.releases:
        if Path(manifest).exists():
            print(f"release: {os.path.relpath(json.loads(Path(manifest).read_text())['path'])}")
    for evaluation in W.evaluations:
        if Path(evaluation).exists() and evaluation.endswith(".md"):
            print(f"evaluation report: {evaluation}")
    if Path(W.catalog).exists():
        print(f"catalog: {W.catalog}  (duckdb {W.catalog} \"show all tables\")")

# The run's catalog over every stage output, and Snakemake's HTML report figures per family with a
# release: the funnel, time and model calls per stage, the release card.
def _catalog_tables(wildcards):
    """Every build table, and the evaluation tables: all of them when `evaluate` is a target (built
    first, so `evaluate` leaves the catalog current), else those that exist (the `release` target never
    runs an evaluation for its catalog, and after `evaluate` sees the same inputs: `-n release` is a no-op).
    Read when Snakemake builds the DAG: its targets are not known while the rule files are read."""
    evaluations = W.catalog_tables("evaluation")
    return W.catalog_tables("build") + (evaluations if "evaluate" in W.targets else [p for p in evaluations if Path(p).exists()])


W.step("build_catalog", family="catalog", section=None, folder=W.rundir, files={"catalog": "catalog.duckdb"},
       inputs={"tables": _catalog_tables})
W.report_families = {Path(m).parent.parent.name: m for m in W.releases}  # {RUNDIR}/<family>/<release stage>/release.json
if W.report_families:
    _shown = {"category": "{family}", "subcategory": "funnel"}
    W.step("report_funnel", family="reports", section=None, slot="{family}", domain=[{"family": f} for f in W.report_families],
           folder=f"{W.rundir}/reports/{{family}}", constraints={"family": "|".join(W.report_families)},
           inputs={"outputs": lambda wc: [p for p in W.catalog_tables("build") if p.startswith(f"{W.rundir}/{wc['family']}/")],
                   "release": lambda wc: [W.report_families[wc["family"]]]},
           per_job=lambda wc: {"family": wc["family"]},
           files={"funnel": "funnel.svg", "stages": "stages.svg", "card": "card.html"},
           reports={"funnel": {**_shown, "caption": "report/funnel.rst"}, "stages": {**_shown, "caption": "report/stages.rst"},
                    "card": {"category": "{family}", "subcategory": "release card"}})
W.reports = W.steps["report_funnel"].every("funnel") if W.report_families else []

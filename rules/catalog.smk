# The run's catalog over every stage output, and Snakemake's HTML report figures per family with a
# release: the funnel, time and model calls per stage, the release card.
def _catalog_tables(wildcards):
    """Every build table, and the evaluation tables that exist (the `release` target never runs an
    evaluation for its catalog, and after `evaluate` sees the same inputs: `-n release` is a no-op).
    Under `evaluate` alone: every evaluation table (built first, so `evaluate` leaves the catalog
    current) and the build tables the evaluations read or that exist (an evaluation of a release
    given by path builds nothing). Read when Snakemake builds the DAG: its targets are not known
    while the rule files are read."""
    evaluations = W.catalog_tables("evaluation")
    if "evaluate" not in W.targets:
        return W.catalog_tables("build") + [p for p in evaluations if Path(p).exists()]
    needed = W.build_steps_evaluated() if "release" not in W.targets else set(W.steps)
    build = [p for step in W.steps.values() if step.kind == "build" for p in step.tables()
             if step.rule in needed or Path(p).exists()]
    return build + evaluations

W.step("build_catalog", family="catalog", section=None, folder=W.rundir, files={"catalog": "catalog.duckdb"},
       inputs={"tables": _catalog_tables})
W.report_families = {Path(m).parent.parent.name: m for m in W.releases}  # {RUNDIR}/<family>/<release stage>/release.json
# A funnel per build family, with a release or not: the shared retrieval layer's stages are stages of the run too.
_funnels = sorted({step.family for step in W.steps.values() if step.kind == "build" and step.tables()})
if _funnels:
    _shown = {"category": "{family}", "subcategory": "funnel"}
    W.step("report_funnel", family="reports", section=None, slot="{family}", domain=[{"family": f} for f in _funnels],
           folder=f"{W.rundir}/reports/{{family}}", constraints={"family": "|".join(_funnels)},
           inputs={"outputs": lambda wc: [p for p in W.catalog_tables("build") if p.startswith(f"{W.rundir}/{wc['family']}/")],
                   "release": lambda wc: [W.report_families[wc["family"]]] if wc["family"] in W.report_families else []},
           per_job=lambda wc: {"family": wc["family"]},
           files={"funnel": "funnel.svg", "stages": "stages.svg", "card": "card.html"},
           reports={"funnel": {**_shown, "caption": "report/funnel.rst"}, "stages": {**_shown, "caption": "report/stages.rst"},
                    "card": {"category": "{family}", "subcategory": "release card"}})
W.reports = W.steps["report_funnel"].every("funnel") if _funnels else []

# The bill before the run (stages/core/estimate.py): `snakemake estimate` runs only the free steps
# whose outputs the model steps' counts need, then projects every model step's calls and cost. The
# plan is made only when a job of this rule is (it reads every step's params: seconds at parse time).
from functools import cache as _cache  # noqa: E402

from stages.core.estimate import plan as _cost_plan  # noqa: E402

_plan = _cache(lambda: _cost_plan(W))
W.step("estimate_cost", family="catalog", section="estimate", folder=f"{W.rundir}/estimate", per_job=lambda wc: {"plan": _plan()},
       inputs={"tables": lambda wc: [p for paths in _plan()["measured"].values() for p in paths],
               "profile": W.get("estimate.profile", "config/estimate_profile.yaml")},
       files={"estimate": "estimate.json", "table": "estimate.md"})

# Snakemake's HTML report: `snakemake --cores 2 report && snakemake report --report report.html`.
# Per family with a release: the funnel (rows through each stage, rejects by reason), time and
# model calls per stage, and the release card, grouped under the family's category. Evaluation
# reports and plots are marked in their own rule files (name `evaluate` too to include them).
REPORT_FAMILIES = {Path(m).parent.parent.name: m for m in RELEASES}  # {RUNDIR}/<family>/<release stage>/release.json
REPORTS = []  # the report figures, the `report` target's inputs


def _family_outputs(wildcards):
    """The family's stage outputs (the report sidecars sit beside them)."""
    return [p for p in CATALOG_TABLES if p.startswith(f"{RUNDIR}/{wildcards.family}/")]


if REPORT_FAMILIES:

    rule report_funnel:
        input:
            stage=stage_code("report_funnel"),
            outputs=_family_outputs,
            release=lambda w: REPORT_FAMILIES[w.family],
        output:
            funnel=report(f"{RUNDIR}/reports/{{family}}/funnel.svg", category="{family}", subcategory="funnel",
                          caption="report/funnel.rst"),
            stages=report(f"{RUNDIR}/reports/{{family}}/stages.svg", category="{family}", subcategory="funnel",
                          caption="report/stages.rst"),
            card=report(f"{RUNDIR}/reports/{{family}}/card.html", category="{family}", subcategory="release card"),
        wildcard_constraints:
            family="|".join(REPORT_FAMILIES),
        params:
            io=stage_io,
            version=stage_version("report_funnel"),
            settings=lambda w: settings({"family": w.family}),
        log:
            f"{RUNDIR}/logs/reports/{{family}}.log",
        benchmark:
            f"{RUNDIR}/benchmarks/reports/{{family}}.tsv"
        shell:
            stage_shell("report_funnel")

    REPORTS.extend(expand(rules.report_funnel.output.funnel, family=sorted(REPORT_FAMILIES)))

# MCiteBench sources (seed mcitebench.txt §3.2): OpenReview API v2 harvest -> papers, reviews,
# comments, rebuttal threads and PDFs -> MinerU parsing into evidence elements.
# Settings: the `mcitebench.harvest_openreview` and `mcitebench.parse_pdfs` sections of the config
# (each the params of the stage it is named after); parse reads the PDF store the harvest wrote.
OR = config.get("mcitebench", {})

if OR.get("enabled", False):
    _harvest = OR.get("harvest_openreview", {})
    # a replay lists its WARC as an input: a new recording reruns the harvest and what follows
    _replay = {"replay": _harvest["warc"]} if _harvest.get("mode") == "replay" and _harvest.get("warc") else {}

    rule harvest_openreview:
        input:
            stage=stage_code("harvest_openreview"),
            **_replay,
        output:
            papers=run_path("mcitebench", "harvest_openreview", "papers"),
            reviews=run_path("mcitebench", "harvest_openreview", "reviews"),
            comments=run_path("mcitebench", "harvest_openreview", "comments"),
            threads=run_path("mcitebench", "harvest_openreview", "threads"),
        params:
            io=stage_io,
            version=stage_version("harvest_openreview"),
            settings=settings(_harvest),
        log:
            log_path("mcitebench", "harvest_openreview"),
        benchmark:
            bench_path("mcitebench", "harvest_openreview")
        shell:
            stage_shell("harvest_openreview")

    rule parse_pdfs:
        input:
            stage=stage_code("parse_pdfs"),
            papers=rules.harvest_openreview.output.papers,
        output:
            elements=run_path("mcitebench", "parse_pdfs", "elements"),
        params:
            io=stage_io,
            version=stage_version("parse_pdfs"),
            settings=settings({**OR.get("parse_pdfs", {}), "pdf_store": _harvest.get("pdf_store", "data/cache/pdfs")}),
        log:
            log_path("mcitebench", "parse_pdfs"),
        benchmark:
            bench_path("mcitebench", "parse_pdfs")
        shell:
            stage_shell("parse_pdfs")

    CATALOG_TABLES.extend([
        rules.harvest_openreview.output.papers,
        rules.harvest_openreview.output.reviews,
        rules.harvest_openreview.output.comments,
        rules.harvest_openreview.output.threads,
        rules.parse_pdfs.output.elements,
    ])

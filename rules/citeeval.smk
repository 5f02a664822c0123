# CiteEval-Auto (seed citeeval.txt §2-4, App. C.2, App. F Tables 10-11, Eq. 3) over the responses of
# every evaluation with cited responses: each model of the MCiteBench evaluation
# (rules/eval_mcitebench.smk), of the MAVIS evaluation (rules/eval_mavis.smk) and each (model,
# approach) of the M2RAG evaluation (rules/eval_m2rag.smk, included before this file), and a file in
# CiteEval's JSON format (citeeval.input). Chain per source {src} (mcitebench-<model index> |
# mavis-<model index> | m2rag-<model index>-<approach> | file): [citeeval_from_<family> ->]
# citeeval_prepare -> citeeval_context -> citeeval_itercoe -> citeeval_editdist [<- citeeval_fit] ->
# citeeval_score; one citeeval_report per evaluation, beside the evaluation's own report.
CE = config.get("citeeval", {})

if CE.get("enabled", False):
    _CE_JUDGE = CE["judge"]
    _CE_JUDGE_SETTINGS = {"judge": _CE_JUDGE["name"], "llm": llm_settings(config.get("llm"), _CE_JUDGE.get("llm"))}

    def _ce_section(stage):
        """The config subsection named after `stage` (its params, beside rule-only keys)."""
        return CE.get(stage) or {}

    _CE_FIT = _ce_section("citeeval_fit").get("human_ratings")
    _CE_HUMAN = _ce_section("citeeval_score").get("human_ratings")
    _CE_SOURCES = []  # (report path, [src, ...], title)

    def _ce(stage, table):
        return run_path("citeeval", stage, table, "{src}")

    def _ce_log(stage):
        return log_path("citeeval", stage, "{src}")

    def _ce_bench(stage):
        return bench_path("citeeval", stage, "{src}")

    wildcard_constraints:
        src=r"mcitebench-\d{5}|mavis-\d{5}|m2rag-\d{5}-(?:single_stage|multi_stage|separate)|file",

    if EV.get("enabled", False) and CE.get("from_evaluate", True):
        rule citeeval_from_mcitebench:
            input:
                stage=stage_code("citeeval_from_mcitebench"),
                responses=rules.generate_answers.output.responses,
            output:
                responses=run_path("citeeval", "citeeval_from_mcitebench", "responses", "mcitebench-{m}"),
            params:
                io=stage_io,
                version=stage_version("citeeval_from_mcitebench"),
                settings=settings({}),
            log:
                log_path("citeeval", "citeeval_from_mcitebench", "mcitebench-{m}"),
            benchmark:
                bench_path("citeeval", "citeeval_from_mcitebench", "mcitebench-{m}")
            shell:
                stage_shell("citeeval_from_mcitebench")

        _CE_SOURCES.append((f"{RUNDIR}/eval_mcitebench/citeeval_report/report.md", [f"mcitebench-{m}" for m in _M],
                            f"CiteEval-Auto on the MCiteBench evaluation"))

    # the MAVIS and M2RAG evaluations' responses, when their rules are in this run
    if CE.get("from_evaluate", True) and workflow.is_rule("mavis_generate_answers"):
        rule citeeval_from_mavis:
            input:
                stage=stage_code("citeeval_from_mavis"),
                responses=rules.mavis_generate_answers.output.responses,
            output:
                responses=run_path("citeeval", "citeeval_from_mavis", "responses", "mavis-{m}"),
            params:
                io=stage_io,
                version=stage_version("citeeval_from_mavis"),
                settings=settings({}),
            log:
                log_path("citeeval", "citeeval_from_mavis", "mavis-{m}"),
            benchmark:
                bench_path("citeeval", "citeeval_from_mavis", "mavis-{m}")
            shell:
                stage_shell("citeeval_from_mavis")

        _CE_SOURCES.append((f"{RUNDIR}/eval_mavis/citeeval_report/report.md", [f"mavis-{m}" for m in _MV_M],
                            "CiteEval-Auto on the MAVIS evaluation"))

    if CE.get("from_evaluate", True) and workflow.is_rule("m2rag_generate"):
        rule citeeval_from_m2rag:
            input:
                stage=stage_code("citeeval_from_m2rag"),
                responses=rules.m2rag_generate.output.responses,
            output:
                responses=run_path("citeeval", "citeeval_from_m2rag", "responses", "m2rag-{em}-{approach}"),
            params:
                io=stage_io,
                version=stage_version("citeeval_from_m2rag"),
                settings=settings({}),
            log:
                log_path("citeeval", "citeeval_from_m2rag", "m2rag-{em}-{approach}"),
            benchmark:
                bench_path("citeeval", "citeeval_from_m2rag", "m2rag-{em}-{approach}")
            shell:
                stage_shell("citeeval_from_m2rag")

        _CE_SOURCES.append((f"{RUNDIR}/eval_m2rag/citeeval_report/report.md", [f"m2rag-{slot}" for slot in _EM_SLOTS],
                            "CiteEval-Auto on the M2RAG evaluation"))

    if CE.get("input"):
        _CE_SOURCES.append((f"{RUNDIR}/citeeval/citeeval_report/report.md", ["file"], f"CiteEval-Auto on {Path(CE['input']).name}"))

    def _prepare_input(w):
        if w.src == "file":
            return {"citeeval_json": CE["input"]}
        family = w.src.split("-", 1)[0]  # mcitebench | mavis | m2rag: its converter's output
        return {"responses": run_path("citeeval", f"citeeval_from_{family}", "responses", w.src)}

    rule citeeval_prepare:
        input:
            unpack(_prepare_input),
            stage=stage_code("citeeval_prepare"),
        output:
            responses=_ce("citeeval_prepare", "responses"),
            statements=_ce("citeeval_prepare", "statements"),
            export=f"{RUNDIR}/citeeval/citeeval_prepare/citeeval.{{src}}.json",
        params:
            io=stage_io,
            version=stage_version("citeeval_prepare"),
            settings=settings(_ce_section("citeeval_prepare")),
        log:
            _ce_log("citeeval_prepare"),
        benchmark:
            _ce_bench("citeeval_prepare")
        shell:
            stage_shell("citeeval_prepare")

    rule citeeval_context:
        input:
            stage=stage_code("citeeval_context"),
            prompts=prompt_files("citeeval_context"),
            responses=rules.citeeval_prepare.output.responses,
            statements=rules.citeeval_prepare.output.statements,
        output:
            contexts=_ce("citeeval_context", "contexts"),
        params:
            io=stage_io,
            version=stage_version("citeeval_context"),
            settings=settings({**_CE_JUDGE_SETTINGS, **_ce_section("citeeval_context")}),
        resources:
            gpu=gpus(_CE_JUDGE_SETTINGS["llm"]),
        log:
            _ce_log("citeeval_context"),
        benchmark:
            _ce_bench("citeeval_context")
        shell:
            stage_shell("citeeval_context")

    rule citeeval_itercoe:
        input:
            stage=stage_code("citeeval_itercoe"),
            prompts=prompt_files("citeeval_itercoe"),
            responses=rules.citeeval_prepare.output.responses,
            statements=rules.citeeval_prepare.output.statements,
            contexts=rules.citeeval_context.output.contexts,
        output:
            ratings=_ce("citeeval_itercoe", "ratings"),
        params:
            io=stage_io,
            version=stage_version("citeeval_itercoe"),
            settings=settings({**_CE_JUDGE_SETTINGS, **_ce_section("citeeval_itercoe")}),
        resources:
            gpu=gpus(_CE_JUDGE_SETTINGS["llm"]),
        log:
            _ce_log("citeeval_itercoe"),
        benchmark:
            _ce_bench("citeeval_itercoe")
        shell:
            stage_shell("citeeval_itercoe")

    if _CE_FIT:
        rule citeeval_fit:
            input:
                stage=stage_code("citeeval_fit"),
                ratings=_CE_FIT,
            output:
                coefficients=f"{RUNDIR}/citeeval/citeeval_fit/coefficients.json",
            params:
                io=stage_io,
                version=stage_version("citeeval_fit"),
                settings=settings({k: v for k, v in _ce_section("citeeval_fit").items() if k != "human_ratings"}),
            log:
                f"{RUNDIR}/logs/citeeval/citeeval_fit.log",
            benchmark:
                f"{RUNDIR}/benchmarks/citeeval/citeeval_fit.tsv"
            shell:
                stage_shell("citeeval_fit")

    rule citeeval_editdist:
        input:
            stage=stage_code("citeeval_editdist"),
            statements=rules.citeeval_prepare.output.statements,
            ratings=rules.citeeval_itercoe.output.ratings,
            **({"coefficients": f"{RUNDIR}/citeeval/citeeval_fit/coefficients.json"} if _CE_FIT else {}),
        output:
            distances=_ce("citeeval_editdist", "distances"),
        params:
            io=stage_io,
            version=stage_version("citeeval_editdist"),
            settings=settings(_ce_section("citeeval_editdist")),
        log:
            _ce_log("citeeval_editdist"),
        benchmark:
            _ce_bench("citeeval_editdist")
        shell:
            stage_shell("citeeval_editdist")

    rule citeeval_score:
        input:
            stage=stage_code("citeeval_score"),
            responses=rules.citeeval_prepare.output.responses,
            statements=rules.citeeval_prepare.output.statements,
            contexts=rules.citeeval_context.output.contexts,
            ratings=rules.citeeval_itercoe.output.ratings,
            distances=rules.citeeval_editdist.output.distances,
            **({"human": _CE_HUMAN} if _CE_HUMAN else {}),
        output:
            responses=_ce("citeeval_score", "response_scores"),
            statements=_ce("citeeval_score", "statement_scores"),
            summary=_ce("citeeval_score", "summary"),
            meta=_ce("citeeval_score", "meta"),
        params:
            io=stage_io,
            version=stage_version("citeeval_score"),
            settings=settings({}),
        log:
            _ce_log("citeeval_score"),
        benchmark:
            _ce_bench("citeeval_score")
        shell:
            stage_shell("citeeval_score")

    _CE_PER_SOURCE = {
        "responses": rules.citeeval_score.output.responses,
        "statements": rules.citeeval_score.output.statements,
        "summary": rules.citeeval_score.output.summary,
        "meta": rules.citeeval_score.output.meta,
        "contexts": rules.citeeval_context.output.contexts,
        "ratings": rules.citeeval_itercoe.output.ratings,
        "distances": rules.citeeval_editdist.output.distances,
    }

    def _report_input(w):
        _, srcs, _ = next(s for s in _CE_SOURCES if s[0] == f"{RUNDIR}/{w.where}/citeeval_report/report.md")
        return {name: expand(path, src=srcs) for name, path in _CE_PER_SOURCE.items()}

    def _report_title(w):
        return next(s[2] for s in _CE_SOURCES if s[0] == f"{RUNDIR}/{w.where}/citeeval_report/report.md")

    rule citeeval_report:
        input:
            unpack(_report_input),
            stage=stage_code("citeeval_report"),
        output:
            # grouped in the HTML report under the family whose responses it scores
            report=report(f"{RUNDIR}/{{where}}/citeeval_report/report.md", subcategory="CiteEval-Auto",
                          category=lambda w: w.where.removeprefix("eval_")),
            db=f"{RUNDIR}/{{where}}/citeeval_report/citeeval.duckdb",
        wildcard_constraints:
            where=r"eval_mcitebench|eval_mavis|eval_m2rag|citeeval",
        params:
            io=stage_io,
            version=stage_version("citeeval_report"),
            settings=lambda w: settings({"title": _ce_section("citeeval_report").get("title") or _report_title(w)}),
        log:
            f"{RUNDIR}/logs/{{where}}/citeeval_report.log",
        benchmark:
            f"{RUNDIR}/benchmarks/{{where}}/citeeval_report.tsv"
        shell:
            stage_shell("citeeval_report")

    EVALUATIONS.extend(path for path, _, _ in _CE_SOURCES)

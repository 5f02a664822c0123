# Evaluation on an M2RAG release (seed m2rag.txt §3, §5, §6, App. D-E): for every model in
# config eval_m2rag.models and every approach in eval_m2rag.approaches: multi-modal answers
# (m2rag_generate) -> the eight metrics' judgements (m2rag_judge) -> one report over all of them
# (markdown laid out like Table 2, DuckDB file). Per-(model, approach) files use the shard slot of
# run_path: <table>.<model index>-<approach>.parquet; every table has model and approach columns.
EM = config.get("eval_m2rag", {})


def _m2rag_release():
    """eval_m2rag.release: null = this run's M2RAG release manifest; else a released folder, or M2RAG's
    published dev_set.jsonl (stages.core.m2rag_eval.read_dev_set)."""
    return EM.get("release") or f"{RUNDIR}/m2rag/release_m2rag/release.json"


# With no release folder given and the M2RAG family off, this run builds no M2RAG release: there is
# nothing to evaluate, so the evaluation is left out (a config that turns other families off for
# their own evaluations keeps working).
if EM.get("enabled", False) and (EM.get("release") or config.get("m2rag", {}).get("enabled", False)):
    _EM_MODELS = EM["models"]
    _EM_APPROACHES = EM["approaches"]
    _EM_SLOTS = [f"{i:05d}-{a}" for i in range(len(_EM_MODELS)) for a in _EM_APPROACHES]
    _EM_JUDGE = EM["judge"]
    _EM_JUDGE_SETTINGS = {"judge": _EM_JUDGE["name"], "llm": llm_settings(config.get("llm"), _EM_JUDGE.get("llm")),
                          "vision": _EM_JUDGE.get("vision")}

    def _em_candidate(w):
        model = _EM_MODELS[int(w.em)]
        return {"model": model["name"], "approach": w.approach, "llm": llm_settings(config.get("llm"), model.get("llm")),
                "vision": model.get("vision")}

    def _em(stage, table):
        return run_path("eval_m2rag", stage, table, "{em}-{approach}")

    wildcard_constraints:
        em=r"\d{5}",
        approach="single_stage|multi_stage|separate",

    rule m2rag_generate:
        input:
            stage=stage_code("m2rag_generate"),
            prompts=prompt_files("m2rag_answer_single", "m2rag_answer_text", "m2rag_interleave", "m2rag_refine"),
            release=_m2rag_release(),
        output:
            responses=_em("m2rag_generate", "responses"),
        params:
            io=stage_io,
            release=release_version(EM.get("release")),
            version=stage_version("m2rag_generate"),
            settings=lambda w: settings({**_em_candidate(w), **EM.get("m2rag_generate", {})}),
        resources:
            gpu=lambda w: gpus(_em_candidate(w)["llm"]),
        log:
            log_path("eval_m2rag", "m2rag_generate", "{em}-{approach}"),
        benchmark:
            bench_path("eval_m2rag", "m2rag_generate", "{em}-{approach}")
        shell:
            stage_shell("m2rag_generate")

    rule m2rag_judge:
        input:
            stage=stage_code("m2rag_judge"),
            prompts=prompt_files("m2rag_judge_fluency", "m2rag_judge_relevance", "m2rag_judge_image_coherence",
                                 "m2rag_judge_image_helpfulness", "m2rag_judge_image_reference", "m2rag_judge_image_recall",
                                 "m2rag_ragas_context", "m2rag_ragas_statements", "m2rag_ragas_nli"),
            responses=rules.m2rag_generate.output.responses,
        output:
            judgements=_em("m2rag_judge", "judgements"),
        params:
            io=stage_io,
            version=stage_version("m2rag_judge"),
            settings=settings({**_EM_JUDGE_SETTINGS, **EM.get("m2rag_judge", {})}),
        resources:
            gpu=gpus(_EM_JUDGE_SETTINGS["llm"]),
        log:
            log_path("eval_m2rag", "m2rag_judge", "{em}-{approach}"),
        benchmark:
            bench_path("eval_m2rag", "m2rag_judge", "{em}-{approach}")
        shell:
            stage_shell("m2rag_judge")

    rule m2rag_report:
        input:
            stage=stage_code("m2rag_report"),
            responses=[run_path("eval_m2rag", "m2rag_generate", "responses", s) for s in _EM_SLOTS],
            judgements=[run_path("eval_m2rag", "m2rag_judge", "judgements", s) for s in _EM_SLOTS],
        output:
            report=report(f"{RUNDIR}/eval_m2rag/m2rag_report/report.md", category="m2rag", subcategory="evaluation"),
            db=f"{RUNDIR}/eval_m2rag/m2rag_report/evaluation.duckdb",
        params:
            io=stage_io,
            version=stage_version("m2rag_report"),
            settings=settings(EM.get("m2rag_report", {})),
        log:
            f"{RUNDIR}/logs/eval_m2rag/m2rag_report.log",
        benchmark:
            f"{RUNDIR}/benchmarks/eval_m2rag/m2rag_report.tsv"
        shell:
            stage_shell("m2rag_report")

    EVALUATIONS.append(rules.m2rag_report.output.report)

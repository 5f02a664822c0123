# MAVIS evaluation (seed mavis.txt §3.1, §4, §5, App. B-C): for every model in config
# eval_mavis.models: search queries (Table 15) -> retrieval over the release's own documents in
# Text-/Image-/Multi-RAG -> answers with citations (Vanilla Table 16, CoT Table 17, +KE Table 18)
# -> the judge (Tables 12-14) -> completeness, relevance, groundedness, MAUVE and utilisation; then
# one report over all models (markdown laid out like Tables 4-5, Figure 4 plots, DuckDB file).
# Per-model files use the shard slot of run_path for the model's position in eval_mavis.models
# (<table>.00000.parquet = the first model); every table has a `model` column.
MV = config.get("eval_mavis", {})


def _mavis_release():
    """eval_mavis.release: null = this run's MAVIS release manifest; else a released MAVIS folder
    (its benchmark.duckdb is the input, so the rule reruns when the release changes)."""
    given = MV.get("release")
    if not given:
        return f"{RUNDIR}/mavis/release_mavis/release.json"
    return str(Path(given) / "benchmark.duckdb") if Path(given).is_dir() else given


# With release null the evaluation needs this run's MAVIS release: it is skipped when the MAVIS
# family is off (a config that turns MAVIS off to evaluate something else needs no eval_mavis edit).
if MV.get("enabled", False) and (MV.get("release") or config.get("mavis", {}).get("enabled", False)):
    _MV_MODELS = MV["models"]
    _MV_M = [f"{i:05d}" for i in range(len(_MV_MODELS))]
    _MV_RELEASE = release_version(MV.get("release"))  # the evaluated release's content: a new one reruns the evaluation
    _MV_JUDGE = {"judge": MV["judge"]["name"], "llm": llm_settings(config.get("llm"), MV["judge"].get("llm")),
                 "vision": MV["judge"].get("vision")}

    def _mv_candidate(w):
        model = _MV_MODELS[int(w.m)]
        return {"model": model["name"], "llm": llm_settings(config.get("llm"), model.get("llm")), "vision": model.get("vision")}

    def _mv(stage, table):
        return run_path("eval_mavis", stage, table, "{m}")

    wildcard_constraints:
        m=r"\d{5}",

    rule mavis_generate_queries:
        input:
            stage=stage_code("mavis_generate_queries"),
            prompts=prompt_files("mavis_eval_queries"),
            release=_mavis_release(),
        output:
            queries=_mv("mavis_generate_queries", "queries"),
        params:
            io=stage_io,
            release=_MV_RELEASE,
            version=stage_version("mavis_generate_queries"),
            settings=lambda w: settings({**_mv_candidate(w), **MV.get("mavis_generate_queries", {})}),
        resources:
            gpu=lambda w: gpus(_mv_candidate(w)["llm"]),
        log:
            log_path("eval_mavis", "mavis_generate_queries", "{m}"),
        benchmark:
            bench_path("eval_mavis", "mavis_generate_queries", "{m}")
        shell:
            stage_shell("mavis_generate_queries")

    rule mavis_retrieve:
        input:
            stage=stage_code("mavis_retrieve"),
            queries=rules.mavis_generate_queries.output.queries,
            release=_mavis_release(),
        output:
            retrieved=_mv("mavis_retrieve", "retrieved"),
        params:
            io=stage_io,
            release=_MV_RELEASE,
            version=stage_version("mavis_retrieve"),
            settings=settings(MV.get("mavis_retrieve", {})),
        log:
            log_path("eval_mavis", "mavis_retrieve", "{m}"),
        benchmark:
            bench_path("eval_mavis", "mavis_retrieve", "{m}")
        shell:
            stage_shell("mavis_retrieve")

    rule mavis_generate_answers:
        input:
            stage=stage_code("mavis_generate_answers"),
            prompts=prompt_files("mavis_eval_vanilla", "mavis_eval_cot", "mavis_eval_extract"),
            retrieved=rules.mavis_retrieve.output.retrieved,
            release=_mavis_release(),
        output:
            responses=_mv("mavis_generate_answers", "responses"),
        params:
            io=stage_io,
            release=_MV_RELEASE,
            version=stage_version("mavis_generate_answers"),
            settings=lambda w: settings({**_mv_candidate(w), **MV.get("mavis_generate_answers", {})}),
        resources:
            gpu=lambda w: gpus(_mv_candidate(w)["llm"]),
        log:
            log_path("eval_mavis", "mavis_generate_answers", "{m}"),
        benchmark:
            bench_path("eval_mavis", "mavis_generate_answers", "{m}")
        shell:
            stage_shell("mavis_generate_answers")

    rule mavis_judge:
        input:
            stage=stage_code("mavis_judge"),
            prompts=prompt_files("mavis_eval_completeness", "mavis_eval_relevance", "mavis_eval_support"),
            responses=rules.mavis_generate_answers.output.responses,
            release=_mavis_release(),
        output:
            judgements=_mv("mavis_judge", "judgements"),
            sentences=_mv("mavis_judge", "sentences"),
        params:
            io=stage_io,
            release=_MV_RELEASE,
            version=stage_version("mavis_judge"),
            settings=settings({**_MV_JUDGE, **MV.get("mavis_judge", {})}),
        resources:
            gpu=gpus(_MV_JUDGE["llm"]),
        log:
            log_path("eval_mavis", "mavis_judge", "{m}"),
        benchmark:
            bench_path("eval_mavis", "mavis_judge", "{m}")
        shell:
            stage_shell("mavis_judge")

    rule mavis_score:
        input:
            stage=stage_code("mavis_score"),
            responses=rules.mavis_generate_answers.output.responses,
            sentences=rules.mavis_judge.output.sentences,
            judgements=rules.mavis_judge.output.judgements,
        output:
            scores=_mv("mavis_score", "scores"),
            summary=_mv("mavis_score", "summary"),
        params:
            io=stage_io,
            version=stage_version("mavis_score"),
            settings=settings(MV.get("mavis_score", {})),
        log:
            log_path("eval_mavis", "mavis_score", "{m}"),
        benchmark:
            bench_path("eval_mavis", "mavis_score", "{m}")
        shell:
            stage_shell("mavis_score")

    _MV_PER_MODEL = {
        "queries": rules.mavis_generate_queries.output.queries,
        "retrieved": rules.mavis_retrieve.output.retrieved,
        "responses": rules.mavis_generate_answers.output.responses,
        "sentences": rules.mavis_judge.output.sentences,
        "judgements": rules.mavis_judge.output.judgements,
        "scores": rules.mavis_score.output.scores,
        "summary": rules.mavis_score.output.summary,
    }

    rule report_mavis:
        input:
            stage=stage_code("report_mavis"),
            **{name: expand(path, m=_MV_M) for name, path in _MV_PER_MODEL.items()},
        output:
            report=report(f"{RUNDIR}/eval_mavis/report_mavis/report.md", category="mavis", subcategory="evaluation"),
            groundedness_plot=report(f"{RUNDIR}/eval_mavis/report_mavis/groundedness_by_modality.png", category="mavis",
                                     subcategory="evaluation"),
            utilisation_plot=report(f"{RUNDIR}/eval_mavis/report_mavis/utilisation_by_modality.png", category="mavis",
                                    subcategory="evaluation"),
            db=f"{RUNDIR}/eval_mavis/report_mavis/evaluation.duckdb",
        params:
            io=stage_io,
            version=stage_version("report_mavis"),
            settings=settings(MV.get("report_mavis", {})),
        log:
            f"{RUNDIR}/logs/eval_mavis/report_mavis.log",
        benchmark:
            f"{RUNDIR}/benchmarks/eval_mavis/report_mavis.tsv"
        shell:
            stage_shell("report_mavis")

    EVALUATIONS.append(rules.report_mavis.output.report)
    for _path in _MV_PER_MODEL.values():
        EVAL_TABLES.extend(expand(_path, m=_MV_M))

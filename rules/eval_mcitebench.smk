# Evaluation on an MCiteBench release (seed mcitebench.txt §4-5): for every model in
# config evaluate.models: answers with citations -> sentence/citation split -> Table 7/8 citation
# judges and Table 9/10 answer judges -> MCiteBench's metrics, and the Table 11 probe; then one
# report over all models (markdown laid out like Tables 2-4, S-EM plot, DuckDB file).
# Per-model files use the shard slot of run_path for the model's position in evaluate.models
# (<table>.00000.parquet = the first model); every table has a `model` column.
EV = config.get("evaluate", {})


def _release_input():
    """evaluate.release: null = this run's MCiteBench release manifest; else a released data folder
    (mcitebench.jsonl + images/) or its jsonl file."""
    given = EV.get("release")
    if not given:
        return f"{RUNDIR}/mcitebench/release_mcitebench/release.json"
    return str(Path(given) / "mcitebench.jsonl") if Path(given).is_dir() else given


if EV.get("enabled", False):
    _MODELS = EV["models"]
    _M = [f"{i:05d}" for i in range(len(_MODELS))]
    _JUDGE = EV["judge"]
    _JUDGE_SETTINGS = {"judge": _JUDGE["name"], "llm": llm_settings(config.get("llm"), _JUDGE.get("llm")), "vision": _JUDGE.get("vision")}

    def _model(w):
        return _MODELS[int(w.m)]

    def _candidate(w):
        model = _model(w)
        return {"model": model["name"], "llm": llm_settings(config.get("llm"), model.get("llm")), "vision": model.get("vision")}

    def _ev(stage, table):
        return run_path("eval_mcitebench", stage, table, "{m}")

    wildcard_constraints:
        m=r"\d{5}",

    rule generate_answers:
        input:
            stage=stage_code("generate_answers"),
            prompts=prompt_files("mcitebench_answer"),
            release=_release_input(),
        output:
            responses=_ev("generate_answers", "responses"),
        params:
            io=stage_io,
            release=release_version(EV.get("release")),
            version=stage_version("generate_answers"),
            # keys left out of the config take the stage's defaults; a model's own with_captions wins
            settings=lambda w: settings({
                **_candidate(w),
                **EV.get("generate_answers", {}),
                **{k: _model(w)[k] for k in ("with_captions",) if k in _model(w)},
            }),
        resources:
            gpu=lambda w: gpus(_candidate(w)["llm"]),
        log:
            log_path("eval_mcitebench", "generate_answers", "{m}"),
        benchmark:
            bench_path("eval_mcitebench", "generate_answers", "{m}")
        shell:
            stage_shell("generate_answers")

    rule split_citations:
        input:
            stage=stage_code("split_citations"),
            responses=rules.generate_answers.output.responses,
        output:
            citations=_ev("split_citations", "citations"),
            sentences=_ev("split_citations", "sentences"),
        params:
            io=stage_io,
            version=stage_version("split_citations"),
            settings=settings({}),
        log:
            log_path("eval_mcitebench", "split_citations", "{m}"),
        benchmark:
            bench_path("eval_mcitebench", "split_citations", "{m}")
        shell:
            stage_shell("split_citations")

    rule judge_citations:
        input:
            stage=stage_code("judge_citations"),
            prompts=prompt_files("mcitebench_judge_support", "mcitebench_judge_relevance"),
            responses=rules.generate_answers.output.responses,
            sentences=rules.split_citations.output.sentences,
        output:
            judgements=_ev("judge_citations", "citation_judgements"),
        params:
            io=stage_io,
            version=stage_version("judge_citations"),
            settings=settings(_JUDGE_SETTINGS),
        resources:
            gpu=gpus(_JUDGE_SETTINGS["llm"]),
        log:
            log_path("eval_mcitebench", "judge_citations", "{m}"),
        benchmark:
            bench_path("eval_mcitebench", "judge_citations", "{m}")
        shell:
            stage_shell("judge_citations")

    rule judge_answers:
        input:
            stage=stage_code("judge_answers"),
            prompts=prompt_files("mcitebench_judge_explanation", "mcitebench_judge_locating"),
            responses=rules.generate_answers.output.responses,
        output:
            judgements=_ev("judge_answers", "answer_judgements"),
        params:
            io=stage_io,
            version=stage_version("judge_answers"),
            settings=settings({k: v for k, v in _JUDGE_SETTINGS.items() if k != "vision"}),
        resources:
            gpu=gpus(_JUDGE_SETTINGS["llm"]),
        log:
            log_path("eval_mcitebench", "judge_answers", "{m}"),
        benchmark:
            bench_path("eval_mcitebench", "judge_answers", "{m}")
        shell:
            stage_shell("judge_answers")

    rule score_mcitebench:
        input:
            stage=stage_code("score_mcitebench"),
            responses=rules.generate_answers.output.responses,
            citations=rules.split_citations.output.citations,
            sentences=rules.split_citations.output.sentences,
            citation_judgements=rules.judge_citations.output.judgements,
            answer_judgements=rules.judge_answers.output.judgements,
        output:
            scores=_ev("score_mcitebench", "scores"),
            summary=_ev("score_mcitebench", "summary"),
        params:
            io=stage_io,
            version=stage_version("score_mcitebench"),
            settings=settings(EV.get("score_mcitebench", {})),
        log:
            log_path("eval_mcitebench", "score_mcitebench", "{m}"),
        benchmark:
            bench_path("eval_mcitebench", "score_mcitebench", "{m}")
        shell:
            stage_shell("score_mcitebench")

    rule probe_source_identification:
        input:
            stage=stage_code("probe_source_identification"),
            prompts=prompt_files("mcitebench_probe_source"),
            responses=rules.generate_answers.output.responses,
        output:
            probe=_ev("probe_source_identification", "probe"),
        params:
            io=stage_io,
            version=stage_version("probe_source_identification"),
            settings=lambda w: settings(_candidate(w)),
        resources:
            gpu=lambda w: gpus(_candidate(w)["llm"]),
        log:
            log_path("eval_mcitebench", "probe_source_identification", "{m}"),
        benchmark:
            bench_path("eval_mcitebench", "probe_source_identification", "{m}")
        shell:
            stage_shell("probe_source_identification")

    # App. D.1 (Table 13): the same judgements and scores under a second judge, when one is configured.
    _SWAP = EV.get("swap_judge")
    if _SWAP:
        _SWAP_SETTINGS = {"judge": _SWAP["name"], "llm": llm_settings(config.get("llm"), _SWAP.get("llm")), "vision": _SWAP.get("vision")}

        rule judge_citations_swap:
            input:
                stage=stage_code("judge_citations"),
                prompts=prompt_files("mcitebench_judge_support", "mcitebench_judge_relevance"),
                responses=rules.generate_answers.output.responses,
                sentences=rules.split_citations.output.sentences,
            output:
                judgements=_ev("judge_citations_swap", "citation_judgements"),
            params:
                io=stage_io,
                version=stage_version("judge_citations"),
                settings=settings(_SWAP_SETTINGS),
            resources:
                gpu=gpus(_SWAP_SETTINGS["llm"]),
            log:
                log_path("eval_mcitebench", "judge_citations_swap", "{m}"),
            benchmark:
                bench_path("eval_mcitebench", "judge_citations_swap", "{m}")
            shell:
                stage_shell("judge_citations")

        rule judge_answers_swap:
            input:
                stage=stage_code("judge_answers"),
                prompts=prompt_files("mcitebench_judge_explanation", "mcitebench_judge_locating"),
                responses=rules.generate_answers.output.responses,
            output:
                judgements=_ev("judge_answers_swap", "answer_judgements"),
            params:
                io=stage_io,
                version=stage_version("judge_answers"),
                settings=settings({k: v for k, v in _SWAP_SETTINGS.items() if k != "vision"}),
            resources:
                gpu=gpus(_SWAP_SETTINGS["llm"]),
            log:
                log_path("eval_mcitebench", "judge_answers_swap", "{m}"),
            benchmark:
                bench_path("eval_mcitebench", "judge_answers_swap", "{m}")
            shell:
                stage_shell("judge_answers")

        rule score_mcitebench_swap:
            input:
                stage=stage_code("score_mcitebench"),
                responses=rules.generate_answers.output.responses,
                citations=rules.split_citations.output.citations,
                sentences=rules.split_citations.output.sentences,
                citation_judgements=rules.judge_citations_swap.output.judgements,
                answer_judgements=rules.judge_answers_swap.output.judgements,
            output:
                scores=_ev("score_mcitebench_swap", "scores"),
                summary=_ev("score_mcitebench_swap", "summary"),
            params:
                io=stage_io,
                version=stage_version("score_mcitebench"),
                settings=settings(EV.get("score_mcitebench", {})),
            log:
                log_path("eval_mcitebench", "score_mcitebench_swap", "{m}"),
            benchmark:
                bench_path("eval_mcitebench", "score_mcitebench_swap", "{m}")
            shell:
                stage_shell("score_mcitebench")

    # App. C.3 (Table 12): a label sheet of every citation judgement; with evaluate.human_labels,
    # the judge's precision / recall / F1 against the labels.
    rule validate_judge:
        input:
            stage=stage_code("validate_judge"),
            responses=expand(rules.generate_answers.output.responses, m=_M),
            sentences=expand(rules.split_citations.output.sentences, m=_M),
            citation_judgements=expand(rules.judge_citations.output.judgements, m=_M),
            labels=[EV["human_labels"]] if EV.get("human_labels") else [],
        output:
            labels=f"{RUNDIR}/eval_mcitebench/validate_judge/labels.parquet",
            agreement=f"{RUNDIR}/eval_mcitebench/validate_judge/agreement.parquet",
            label_sheet=f"{RUNDIR}/eval_mcitebench/validate_judge/label_sheet.csv",
        params:
            io=stage_io,
            version=stage_version("validate_judge"),
            settings=settings({}),
        log:
            f"{RUNDIR}/logs/eval_mcitebench/validate_judge.log",
        benchmark:
            f"{RUNDIR}/benchmarks/eval_mcitebench/validate_judge.tsv"
        shell:
            stage_shell("validate_judge")

    _PER_MODEL = {
        "responses": rules.generate_answers.output.responses,
        "citations": rules.split_citations.output.citations,
        "sentences": rules.split_citations.output.sentences,
        "citation_judgements": rules.judge_citations.output.judgements,
        "answer_judgements": rules.judge_answers.output.judgements,
        "scores": rules.score_mcitebench.output.scores,
        "summary": rules.score_mcitebench.output.summary,
        "probe": rules.probe_source_identification.output.probe,
    }

    rule report_mcitebench:
        input:
            stage=stage_code("report_mcitebench"),
            **{name: expand(path, m=_M) for name, path in _PER_MODEL.items()},
            swap_summary=expand(rules.score_mcitebench_swap.output.summary, m=_M) if _SWAP else [],
            agreement=rules.validate_judge.output.agreement if EV.get("human_labels") else [],
        output:
            report=report(f"{RUNDIR}/eval_mcitebench/report_mcitebench/report.md", category="mcitebench", subcategory="evaluation"),
            plot=report(f"{RUNDIR}/eval_mcitebench/report_mcitebench/sem_by_modality.png", category="mcitebench", subcategory="evaluation"),
            rq2_plot=report(f"{RUNDIR}/eval_mcitebench/report_mcitebench/sem_by_modality_pair.png", category="mcitebench", subcategory="evaluation"),
            db=f"{RUNDIR}/eval_mcitebench/report_mcitebench/evaluation.duckdb",
        params:
            io=stage_io,
            version=stage_version("report_mcitebench"),
            settings=settings({"title": "MCiteBench evaluation", **EV.get("report_mcitebench", {}),
                               "scoring": EV.get("score_mcitebench", {}).get("scoring", "strict"),
                               "judges": [_JUDGE["name"], _SWAP["name"]] if _SWAP else []}),
        log:
            f"{RUNDIR}/logs/eval_mcitebench/report_mcitebench.log",
        benchmark:
            f"{RUNDIR}/benchmarks/eval_mcitebench/report_mcitebench.tsv"
        shell:
            stage_shell("report_mcitebench")

    EVALUATIONS.append(rules.report_mcitebench.output.report)
    EVALUATIONS.append(rules.validate_judge.output.label_sheet)
    # The per-model tables are in the report's DuckDB file, and in the catalog once they exist
    # (EVAL_TABLES, not CATALOG_TABLES: the default `release` target must not run an evaluation).
    for _path in _PER_MODEL.values():
        EVAL_TABLES.extend(expand(_path, m=_M))

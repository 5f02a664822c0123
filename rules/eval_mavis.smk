# MAVIS evaluation (seed mavis.txt §3.1, §4, §5, App. B-C): for every model of eval_mavis.models, search
# queries (Table 15) -> retrieval over the release's own documents (Text-/Image-/Multi-RAG) -> answers
# with citations (Vanilla Table 16, CoT Table 17, +KE Table 18) -> the judge (Tables 12-14) ->
# completeness, relevance, groundedness, MAUVE and utilisation; one report over all models.
EM_ = "eval_mavis"
if W.enabled(EM_) and (W.get(f"{EM_}.release") or W.enabled("mavis")):
    _given = W.get(f"{EM_}.release")  # null: this run's release; or a released MAVIS folder (its benchmark.duckdb)
    _release = (str(Path(_given) / "benchmark.duckdb") if Path(_given).is_dir() else _given) if _given else \
        W.steps["release_mavis"].output("manifest")
    _per_model = {"slot": "{m}", "domain": W.candidates(EM_), "constraints": {"m": r"\d{5}"}}
    _candidate = {"per_job": lambda wc: W.candidate(EM_, wc["m"])[0], "models": lambda wc: W.candidate(EM_, wc["m"])[1]}
    _judge, _judge_llm = W.judge(EM_)
    _reads = {"rerun_on": {"release": release_version(_given)}}  # every step reading a given release reruns on a new one

    W.step("mavis_generate_queries", family=EM_, inputs={"release": _release}, **_candidate, **_per_model, **_reads)
    W.step("mavis_retrieve", family=EM_, inputs={"queries": W.out("mavis_generate_queries", "queries"), "release": _release},
           **_per_model, **_reads)
    W.step("mavis_generate_answers", family=EM_, inputs={"retrieved": W.out("mavis_retrieve", "retrieved"), "release": _release},
           **_candidate, **_per_model, **_reads)
    W.step("mavis_judge", family=EM_, inputs={"responses": W.out("mavis_generate_answers", "responses"), "release": _release},
           wiring=_judge, models=lambda wc: _judge_llm, **_per_model, **_reads)
    W.step("mavis_score", family=EM_, **_per_model,
           inputs={"responses": W.out("mavis_generate_answers", "responses"), "sentences": W.out("mavis_judge", "sentences"),
                   "judgements": W.out("mavis_judge", "judgements")})
    # Table 3: each retriever ranking the whole release database against the entailed fact documents
    W.step("mavis_retrieval_quality", family=EM_, files={"summary": "retrieval_summary"}, inputs={"queries": W.every("mavis_generate_queries", "queries"), "release": _release},
           **_reads)
    # Table 6: a label sheet of the judge's answered judgements; with labelled copies, judge vs humans
    _labels = W.get(f"{EM_}.human_labels")
    W.step("mavis_validate_judge", family=EM_, files={"label_sheet": "label_sheet.csv", "labels": "labels", "agreement": "agreement"},
           inputs={"responses": W.every("mavis_generate_answers", "responses"), "sentences": W.every("mavis_judge", "sentences"),
                   "judgements": W.every("mavis_judge", "judgements"), "release": _release, "labels": _labels}, **_reads)
    _tables = {"queries": "mavis_generate_queries", "retrieved": "mavis_retrieve", "responses": "mavis_generate_answers",
               "sentences": "mavis_judge", "judgements": "mavis_judge", "scores": "mavis_score", "summary": "mavis_score"}
    _shown = {"category": "mavis", "subcategory": "evaluation"}
    W.step("report_mavis", family=EM_,
           inputs={**{name: W.every(rule, name) for name, rule in _tables.items()}, "retrieval": W.out("mavis_retrieval_quality", "summary"),
                   "agreement": W.out("mavis_validate_judge", "agreement") if _labels else None},
           files={"report": "report.md", "groundedness_plot": "groundedness_by_modality.png",
                  "utilisation_plot": "utilisation_by_modality.png", "db": "evaluation.duckdb"},
           reports={"report": _shown, "groundedness_plot": _shown, "utilisation_plot": _shown})
    W.evaluations += [W.steps["report_mavis"].output("report"), W.steps["mavis_validate_judge"].output("label_sheet")]

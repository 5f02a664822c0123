# Evaluation on an MCiteBench release (seed mcitebench.txt §4-5): for every model of
# eval_mcitebench.models, answers with citations -> sentences and citations -> the Table 7/8 citation
# judges and Table 9/10 answer judges -> MCiteBench's metrics, and the Table 11 probe; then one report
# over all models (Tables 2-4, S-EM plots, DuckDB file). Per-model files carry the model's position in
# the shard slot (<table>.00000.parquet = the first model).
EV = "eval_mcitebench"
if W.enabled(EV) and (W.get(f"{EV}.release") or W.enabled("mcitebench")):
    _given = W.get(f"{EV}.release")  # null: this run's release; or a released folder (mcitebench.jsonl + images/) or its jsonl
    _release = (str(Path(_given) / "mcitebench.jsonl") if Path(_given).is_dir() else _given) if _given else \
        W.steps["release_mcitebench"].output("manifest")
    _models = W.candidates(EV)
    _judge, _judge_llm = W.judge(EV)
    _swap = W.get(f"{EV}.swap_judge")

    _answerer = lambda wc: W.candidate(EV, wc["m"], keys=("vision", "with_captions"))[0]  # a model's own with_captions wins
    _answerer_llm = lambda wc: W.candidate(EV, wc["m"])[1]
    _per_model = {"slot": "{m}", "domain": _models, "constraints": {"m": r"\d{5}"}}

    W.step("generate_answers", family=EV, inputs={"release": _release}, per_job=_answerer, models=_answerer_llm,
           rerun_on={"release": release_version(_given)}, **_per_model)  # a given release's content: a new one reruns it
    W.step("split_citations", family=EV, inputs={"responses": W.out("generate_answers", "responses")}, **_per_model)
    _judged = {"responses": W.out("generate_answers", "responses")}
    for suffix, (judge, judge_llm) in {"": (_judge, _judge_llm), **({"_swap": W.judge(EV, name="swap_judge")} if _swap else {})}.items():
        # App. D.1 (Table 13): the same judgements and scores under a second judge, when one is configured
        W.step(f"judge_citations{suffix}", stage="judge_citations", family=EV, section=f"{EV}.judge_citations",
               inputs={**_judged, "sentences": W.out("split_citations", "sentences")}, wiring=judge,
               models=lambda wc, llm=judge_llm: llm, files={"judgements": "citation_judgements"}, **_per_model)
        W.step(f"judge_answers{suffix}", stage="judge_answers", family=EV, section=f"{EV}.judge_answers", inputs=_judged,
               wiring={"judge": judge["judge"]}, models=lambda wc, llm=judge_llm: llm, files={"judgements": "answer_judgements"},
               **_per_model)
        W.step(f"score_mcitebench{suffix}", stage="score_mcitebench", family=EV, section=f"{EV}.score_mcitebench",
               inputs={**_judged, "citations": W.out("split_citations", "citations"), "sentences": W.out("split_citations", "sentences"),
                       "citation_judgements": W.out(f"judge_citations{suffix}", "judgements"),
                       "answer_judgements": W.out(f"judge_answers{suffix}", "judgements")}, **_per_model)
    W.step("probe_source_identification", family=EV, inputs=_judged, per_job=lambda wc: W.candidate(EV, wc["m"])[0],
           models=_answerer_llm, **_per_model)
    # App. C.3 (Table 12): a label sheet of every citation judgement; with human labels, the judge's agreement
    W.step("validate_judge", family=EV, files={"label_sheet": "label_sheet.csv", "labels": "labels", "agreement": "agreement"},
           inputs={"responses": W.every("generate_answers", "responses"), "sentences": W.every("split_citations", "sentences"),
                   "citation_judgements": W.every("judge_citations", "judgements"), "labels": W.get(f"{EV}.human_labels")})
    _tables = {"responses": "generate_answers", "citations": "split_citations", "sentences": "split_citations",
               "citation_judgements": "judge_citations", "answer_judgements": "judge_answers", "scores": "score_mcitebench",
               "summary": "score_mcitebench", "probe": "probe_source_identification"}
    _shown = {"category": "mcitebench", "subcategory": "evaluation"}
    W.step("report_mcitebench", family=EV,
           inputs={**{name: W.every(rule, "judgements" if "judgements" in name else name) for name, rule in _tables.items()},
                   "swap_summary": W.every("score_mcitebench_swap", "summary") if _swap else None,
                   "agreement": W.every("validate_judge", "agreement") if W.get(f"{EV}.human_labels") else None},
           wiring={"scoring": W.setting("score_mcitebench", "scoring", f"{EV}.score_mcitebench"),
                   **({"judges": [_judge["judge"], _swap["name"]]} if _swap else {})},
           files={"report": "report.md", "plot": "sem_by_modality.png", "rq2_plot": "sem_by_modality_pair.png", "db": "evaluation.duckdb"},
           reports={"report": _shown, "plot": _shown, "rq2_plot": _shown})
    W.evaluations += [W.steps["report_mcitebench"].output("report"), W.steps["validate_judge"].output("label_sheet")]

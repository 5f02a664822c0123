# Evaluation on an M2RAG release (seed m2rag.txt §3, §5, §6, App. D-E): for every model of
# eval_m2rag.models and every approach of eval_m2rag.approaches, multimodal answers -> the judge's eight
# metrics -> one report (Table 2). Files carry "<model index>-<approach>" in the shard slot.
EA = "eval_m2rag"
if W.enabled(EA) and (W.get(f"{EA}.release") or W.enabled("m2rag")):
    # null: this run's release; or a released folder, or M2RAG's published dev_set.jsonl (stages.eval_m2rag.m2rag_eval.read_dev_set)
    _release = W.get(f"{EA}.release") or W.steps["release_m2rag"].output("manifest")
    _slots = [{"em": m["m"], "approach": a} for m in W.candidates(EA) for a in W.get(f"{EA}.approaches", [])]
    _per_slot = {"slot": "{em}-{approach}", "domain": _slots,
                 "constraints": {"em": r"\d{5}", "approach": "single_stage|multi_stage|separate"}}
    _judge, _judge_llm = W.judge(EA)
    W.step("m2rag_generate", family=EA, inputs={"release": _release}, **_per_slot,
           rerun_on={"release": release_version(W.get(f"{EA}.release"))},  # a given release's content: a new one reruns it
           per_job=lambda wc: {**W.candidate(EA, wc["em"])[0], "approach": wc["approach"]},
           models=lambda wc: W.candidate(EA, wc["em"])[1])
    W.step("m2rag_judge", family=EA, inputs={"responses": W.out("m2rag_generate", "responses")}, wiring=_judge,
           models=lambda wc: _judge_llm, **_per_slot)
    W.step("m2rag_report", family=EA, files={"report": "report.md", "db": "evaluation.duckdb"},
           inputs={"responses": W.every("m2rag_generate", "responses"), "judgements": W.every("m2rag_judge", "judgements")},
           reports={"report": {"category": "m2rag", "subcategory": "evaluation"}})
    W.evaluations.append(W.steps["m2rag_report"].output("report"))

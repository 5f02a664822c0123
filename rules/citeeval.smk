# CiteEval-Auto (seed citeeval.txt §2-4, App. C.2, App. F Tables 10-11, Eq. 3) over every evaluation
# with cited responses: each model of the MCiteBench and MAVIS evaluations, each (model, approach) of
# the M2RAG evaluation, and a file in CiteEval's JSON format (citeeval.input). Per source {src}
# (mcitebench-<m> | mavis-<m> | m2rag-<m>-<approach> | file): [citeeval_from_<family> ->]
# citeeval_prepare -> citeeval_context -> citeeval_itercoe -> citeeval_editdist [<- citeeval_fit] ->
# citeeval_score; one citeeval_report per evaluation, beside the evaluation's own report.
CE = "citeeval"
if W.enabled(CE):
    _reports = {}  # where the report lands -> (its sources, its title)
    # each evaluation in this run: (its answering step, its converter's slot, the slot's values)
    _evaluations = {
        "mcitebench": ("generate_answers", "mcitebench-{m}", "eval_mcitebench", "the MCiteBench evaluation"),
        "mavis": ("mavis_generate_answers", "mavis-{m}", "eval_mavis", "the MAVIS evaluation"),
        "m2rag": ("m2rag_generate", "m2rag-{em}-{approach}", "eval_m2rag", "the M2RAG evaluation"),
    }
    for _family, (_answers, _slot, _where, _title) in _evaluations.items():
        if W.get(f"{CE}.from_evaluate", True) and _answers in W.steps:
            _domain = W.steps[_answers].domain
            W.step(f"citeeval_from_{_family}", family=CE, slot=_slot, domain=_domain, inputs={"responses": W.out(_answers, "responses")},
                   constraints={k: v for k, v in {"m": r"\d{5}", "em": r"\d{5}", "approach": r"[a-z_]+"}.items() if f"{{{k}}}" in _slot})
            _reports[_where] = ([_slot.format(**wc) for wc in _domain], f"CiteEval-Auto on {_title}")
    _file = W.get(f"{CE}.input")
    if _file:
        _reports["citeeval"] = (["file"], f"CiteEval-Auto on {Path(_file).name}")
    if _reports:
        _sources = {"slot": "{src}", "domain": [{"src": s} for srcs, _ in _reports.values() for s in srcs],
                    "constraints": {"src": r"(?:mcitebench|mavis)-\d{5}|m2rag-\d{5}-\w+|file"}}

        def _converted(wc):  # a source's converter: citeeval_from_<family>
            family = wc["src"].split("-", 1)[0]
            return [f"{W.rundir}/{CE}/citeeval_from_{family}/responses.{wc['src']}.parquet"]

        W.step("citeeval_prepare", family=CE, files={"export": "citeeval.{src}.json", "responses": "prepared_responses", "statements": "prepared_statements"}, **_sources,
               inputs={"citeeval_json": lambda wc: [_file] if wc["src"] == "file" else [],
                       "responses": lambda wc: [] if wc["src"] == "file" else _converted(wc)})
        _prepared = {"responses": W.out("citeeval_prepare", "responses"), "statements": W.out("citeeval_prepare", "statements")}
        _judge, _judge_llm = W.judge(CE, keys=())
        _judged = {"wiring": _judge, "models": lambda wc: _judge_llm}
        W.step("citeeval_context", family=CE, inputs=_prepared, **_judged, **_sources)
        W.step("citeeval_itercoe", family=CE, inputs=_prepared, **_judged, **_sources)
        _fit = W.get(f"{CE}.citeeval_fit.human_ratings")
        if _fit:
            W.step("citeeval_fit", family=CE, inputs={"ratings": _fit}, files={"coefficients": "coefficients.json"})
        W.step("citeeval_editdist", family=CE, **_sources,
               inputs={"statements": W.out("citeeval_prepare", "statements"), "ratings": W.out("citeeval_itercoe", "ratings"),
                       "coefficients": W.out("citeeval_fit", "coefficients") if _fit else None})
        W.step("citeeval_score", family=CE, **_sources, files={"responses": "response_scores", "statements": "statement_scores"},
               inputs={**_prepared, "contexts": W.out("citeeval_context", "contexts"), "ratings": W.out("citeeval_itercoe", "ratings"),
                       "distances": W.out("citeeval_editdist", "distances"), "human": W.get(f"{CE}.citeeval_score.human_ratings")})
        _scored = {"responses": ("citeeval_score", "responses"), "statements": ("citeeval_score", "statements"),
                   "summary": ("citeeval_score", "summary"), "meta": ("citeeval_score", "meta"),
                   "contexts": ("citeeval_context", "contexts"), "ratings": ("citeeval_itercoe", "ratings"),
                   "distances": ("citeeval_editdist", "distances")}

        def _of_report(rule, name):
            return lambda wc: [W.steps[rule].pattern(name).format(src=s) for s in _reports[wc["where"]][0]]

        W.step("citeeval_report", family=CE, slot="{where}", domain=[{"where": w} for w in _reports],
               folder=f"{W.rundir}/{{where}}/citeeval_report", constraints={"where": "|".join(_reports)},
               inputs={name: _of_report(rule, out) for name, (rule, out) in _scored.items()},
               per_job=lambda wc: {"title": W.get(f"{CE}.citeeval_report.title") or _reports[wc["where"]][1]},
               files={"report": "report.md", "db": "citeeval.duckdb"},
               reports={"report": {"subcategory": "CiteEval-Auto",
                                   "category": lambda w: w.where.removeprefix("eval_")}})
        W.evaluations += [f"{W.rundir}/{where}/citeeval_report/report.md" for where in _reports]

# CiteEval-Auto (seed citeeval.txt §2-4, App. C.2, App. F Tables 10-11, Eq. 3) over the responses of
# every evaluated model of the MCiteBench evaluation, and over a file in CiteEval's JSON format
# (citeeval.input). Per source {src} (mcitebench-<model index> | file): [citeeval_from_mcitebench ->]
# citeeval_prepare -> citeeval_context -> citeeval_itercoe -> citeeval_editdist [<- citeeval_fit] ->
# citeeval_score; one citeeval_report per evaluation, beside the evaluation's own report.
CE = "citeeval"
if W.enabled(CE):
    _reports = {}  # where the report lands -> (its sources, its title)
    if W.get(f"{CE}.from_evaluate", True) and "generate_answers" in W.steps:
        W.step("citeeval_from_mcitebench", family=CE, slot="mcitebench-{m}", domain=W.candidates("eval_mcitebench"),
               inputs={"responses": W.out("generate_answers", "responses")}, constraints={"m": r"\d{5}"})
        _reports["eval_mcitebench"] = ([f"mcitebench-{m['m']}" for m in W.candidates("eval_mcitebench")],
                                       "CiteEval-Auto on the MCiteBench evaluation")
    _file = W.get(f"{CE}.input")
    if _file:
        _reports["citeeval"] = (["file"], f"CiteEval-Auto on {Path(_file).name}")
    if _reports:
        _sources = {"slot": "{src}", "domain": [{"src": s} for srcs, _ in _reports.values() for s in srcs],
                    "constraints": {"src": r"mcitebench-\d{5}|file"}}
        _converted = f"{W.rundir}/{CE}/citeeval_from_mcitebench/responses.{{src}}.parquet"
        W.step("citeeval_prepare", family=CE, files={"export": "citeeval.{src}.json"}, **_sources,
               inputs={"citeeval_json": lambda wc: [_file] if wc["src"] == "file" else [],
                       "responses": lambda wc: [] if wc["src"] == "file" else [_converted.format(**wc)]})
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
               folder=f"{W.rundir}/{{where}}/citeeval_report", constraints={"where": "eval_mcitebench|citeeval"},
               inputs={name: _of_report(rule, out) for name, (rule, out) in _scored.items()},
               per_job=lambda wc: {"title": W.get(f"{CE}.citeeval_report.title") or _reports[wc["where"]][1]},
               files={"report": "report.md", "db": "citeeval.duckdb"},
               reports={"report": {"subcategory": "CiteEval-Auto",
                                   "category": lambda w: "mcitebench" if w.where == "eval_mcitebench" else "citeeval"}})
        W.evaluations += [f"{W.rundir}/{where}/citeeval_report/report.md" for where in _reports]

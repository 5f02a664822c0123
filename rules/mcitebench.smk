# MCiteBench construction (seed mcitebench.txt §3.3-3.6): rebuttal threads and parsed papers ->
# explanation and locating QA -> evidence pairing -> distractors -> model-free checks -> quality
# control -> release. The harvest and the PDF parsing: rules/openreview.smk.
if W.enabled("mcitebench"):
    _elements = W.out("parse_pdfs", "elements")
    W.step("extract_explanation_qa", family="mcitebench", inputs={"threads": W.out("harvest_openreview", "threads")},
           files={"qa": "explanation_qa"})
    W.step("generate_locating_qa", family="mcitebench", inputs={"elements": _elements}, files={"qa": "locating_qa"})
    W.step("pair_evidence", family="mcitebench", files={"questions": "paired_questions", "pairing_sheet": "pairing_sheet.csv"},
           inputs={"qa": W.out(["extract_explanation_qa", "generate_locating_qa"], "qa"), "elements": _elements,
                   "review": W.get("mcitebench.pairing_review")})
    _paired = {"evidence": W.out("pair_evidence", "evidence"), "elements": _elements}
    W.step("sample_distractors", family="mcitebench", files={"questions": "sampled_questions"},
           inputs={"questions": W.out("pair_evidence", "questions"), **_paired})
    W.step("check_questions", family="mcitebench", files={"questions": "screened_questions"},
           inputs={"questions": W.out("sample_distractors", "questions"), **_paired})
    W.step("quality_control", family="mcitebench", files={"questions": "checked_questions", "review_sheet": "review_sheet.csv"},
           inputs={"questions": W.out("check_questions", "questions"), "distractors": W.out("sample_distractors", "distractors"), **_paired})
    W.step("release_mcitebench", family="mcitebench", files={"manifest": "release.json"}, wiring={"releases_dir": W.releases_dir},
           inputs={"questions": W.out("quality_control", "questions"), "distractors": W.out("sample_distractors", "distractors"),
                   "review": W.get("mcitebench.review_sheet"), **_paired})
    W.releases.append(W.steps["release_mcitebench"].output("manifest"))

"""Judge validation (MCiteBench App. C.3, Table 12): how well the citation judge's entailment
judgements agree with human labels.

The stage writes `label_sheet.csv` through the review round trip (stages/core/review.py): one row
per citation judgement of the evaluation (support of a cited sentence, relevance of one cited
item) with the sentence, the cited item and the labels the judge saw, and an empty `human_score`
column (support 0/1/2, relevance 0/1; the judge's own score is not shown). Given a labelled copy
(`labels`, config `evaluate.human_labels`), each labelled row is matched with the judge's row and
the agreement is computed as in the seed: a judgement entails when its score is >= 1 (partially or
fully supported; relevant); precision is the share of the judge's entailments the humans also
label entailed, recall the share of the humans' entailments the judge found, F1 their harmonic
mean; per scope (subjective = explanation, objective = locating, all) and kind (support,
relevance, all), with the share of exactly equal scores. Rows without a human score are skipped.

Rows in are the labelled rows. Rejects: `no_judgement` (the label names no judgement of this
evaluation, e.g. a failed call), `bad_label` (a score outside the kind's scale).

Inputs: responses, sentences, citation_judgements (one file per model each); labels (optional CSV).
Outputs: labels (eval_judge_labels, matched pairs, counted), agreement (eval_judge_agreement),
label_sheet (CSV file).
Params: none.
"""
from __future__ import annotations

import collections

from stages.eval_mcitebench.mcitebench_metrics import harmonic
from stages.core.review import read_sheet, write_sheet
from stages.core.stage import Input, Output, Reject, Stage

VERSION = "1"
SHEET_COLUMNS = ["judgement_id", "model", "question_id", "question_type", "kind", "sentence", "item", "shown", "human_score", "note"]
SCALE = {"support": {0, 1, 2}, "relevance": {0, 1}}
SCOPES = {"explanation": "subjective", "locating": "objective"}


def agreement(pairs: list[dict]) -> list[dict]:
    """Precision / recall / F1 of the judge's entailments (score >= 1) against the humans', per scope and kind."""
    groups: dict[tuple[str, str, str], list[dict]] = collections.defaultdict(list)
    for p in pairs:
        for scope in (SCOPES.get(p["question_type"], p["question_type"]), "all"):
            for kind in (p["kind"], "all"):
                groups[(p["judge"], scope, kind)].append(p)
    out = []
    for (judge, scope, kind), rows in sorted(groups.items()):
        judged = [r["judge_score"] >= 1 for r in rows]
        human = [r["human_score"] >= 1 for r in rows]
        both = sum(j and h for j, h in zip(judged, human))
        precision = both / sum(judged) if any(judged) else None
        recall = both / sum(human) if any(human) else None
        f1 = harmonic(precision, recall) if precision is not None and recall is not None else None
        out.append({"judge": judge, "scope": scope, "kind": kind, "n": len(rows), "precision": precision, "recall": recall,
                    "f1": f1, "exact": sum(r["judge_score"] == r["human_score"] for r in rows) / len(rows)})
    return out


def run(ctx):
    responses = {r["id"]: r for r in ctx.read_rows("responses")}
    sentences = {s["id"]: s for s in ctx.read_rows("sentences")}
    judgements = {j["id"]: j for j in ctx.read_rows("citation_judgements")}
    sheet = []
    for j in sorted(judgements.values(), key=lambda j: (j["model"], j["response_id"], j["sentence_id"], j["kind"], j["item"] or "")):
        if j["status"] != "judged":
            continue
        response, sentence = responses.get(j["response_id"]), sentences.get(j["sentence_id"])
        sheet.append({"judgement_id": j["id"], "model": j["model"], "question_id": response["question_id"] if response else "",
                      "question_type": response["question_type"] if response else "", "kind": j["kind"],
                      "sentence": sentence["sentence"] if sentence else "", "item": j["item"] or "", "shown": " | ".join(j["shown"]),
                      "human_score": "", "note": ""})
    write_sheet(ctx.output_path("label_sheet"), SHEET_COLUMNS, sheet)
    ctx.stats["label_sheet_rows"] = len(sheet)
    pairs = []
    if ctx.has_input("labels"):
        for row in read_sheet(ctx.input_path("labels"), "judgement_id", ["human_score"]):
            if not row["human_score"]:
                ctx.stats["unlabelled_rows"] += 1
                continue
            with ctx.item(row["judgement_id"]):
                j = judgements.get(row["judgement_id"])
                if j is None:
                    raise Reject("no_judgement", f"line {row['line']}: no judgement {row['judgement_id']} in this evaluation")
                if not row["human_score"].isdecimal() or int(row["human_score"]) not in SCALE[j["kind"]]:
                    raise Reject("bad_label", f"line {row['line']}: {j['kind']} takes {sorted(SCALE[j['kind']])}, got {row['human_score']!r}")
                response = responses.get(j["response_id"])
                pair = {"judgement_id": j["id"], "judge": j["judge"], "model": j["model"],
                        "question_type": response["question_type"] if response else "unknown", "kind": j["kind"],
                        "judge_score": j["score"], "human_score": int(row["human_score"])}
                pairs.append(pair)
                ctx.write("labels", [pair])
    ctx.write("agreement", agreement(pairs))


STAGE = Stage(
    name="validate_judge",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("eval_responses, one file per model", many=True, table="eval_responses"),
        "sentences": Input("eval_sentences, one file per model", many=True, table="eval_sentences"),
        "citation_judgements": Input("eval_citation_judgements, one file per model", many=True, table="eval_citation_judgements"),
        "labels": Input("labelled copy of label_sheet.csv (judgement_id, human_score)", optional=True, kind="file"),
    },
    outputs={
        "labels": Output("eval_judge_labels", "human labels matched with the judge's scores"),
        "agreement": Output("eval_judge_agreement", "precision / recall / F1 of the judge against the humans", counted=False),
        "label_sheet": Output(None, "CSV for human labelling: one row per citation judgement, human_score to fill"),
    },
    params={},
    run=run,
    rejects={
        "no_judgement": "the label names no judgement of this evaluation (e.g. a failed call)",
        "bad_label": "the human score is outside the judgement kind's scale",
    },
)

if __name__ == "__main__":
    STAGE.main()

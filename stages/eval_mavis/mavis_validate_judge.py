"""Judge validation (mavis.txt §5.5, App. B.2, Table 6): the Pearson correlation between human and
judge scores of recall, precision, completeness and relevance.

The stage writes `label_sheet.csv` through the review round trip (stages/core/review.py): one row per
answered strict judgement of the evaluation (ok and scored), with what the judge read (the question, the
sentence or the fact, the answer for completeness, the cited documents for support) and empty
`human_score` and `annotator` columns; the judge's own label is not shown. Metrics: `recall` is the
support of a sentence by all its cited documents (Table 12), `precision` by one cited document,
`completeness` one gold fact against the answer (Table 13), `relevance` one sentence (Table 14).
A human score is 1 / 0.5 / 0 or the label's first word (fully / partially / not). Given labelled
copy (`labels`; several annotators may each add a row for the same judgement, naming themselves in
`annotator`), the scores of a judgement are averaged as App. B.2 does for its two annotators, and
per metric:
- `item`: Pearson r between the judge's and the mean human score of each labelled judgement;
- `answer` (Table 6, whose annotators rated answers): per answer, the metric's mean over its
  labelled judgements by the judge and by the humans, Pearson r over the answers.
r is null with fewer than two pairs or when one side is constant. Rows without a human score are
skipped.

Rows in are the labelled rows = rows of `labels` + rejected. Rejects: `no_judgement` (the label
names no answered strict judgement of this evaluation), `bad_label` (not 1 / 0.5 / 0 or fully /
partially / not).

Inputs: responses, sentences, judgements (one file per model each); release (the facts' text);
labels (optional CSV).
Outputs: labels (mavis_eval_judge_labels, one row per labelled sheet row), agreement
(mavis_eval_judge_agreement), label_sheet (CSV file).
Params: none.
"""
from __future__ import annotations

import collections
import math

from stages.eval_mavis.mavis_eval import label_score, load_release, release_folder
from stages.core.review import read_sheet, write_sheet
from stages.core.stage import Input, Output, Reject, Stage

VERSION = "1"
METRICS = {"support": "recall", "support_doc": "precision", "completeness": "completeness", "relevance": "relevance"}
SHEET_COLUMNS = ["judgement_id", "model", "instance_id", "metric", "question", "statement", "answer", "documents", "human_score",
                 "annotator", "note"]
HUMAN = {"1": 1.0, "0.5": 0.5, "0": 0.0, "1.0": 1.0, "0.0": 0.0}


def pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if not sx or not sy:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def human_score(text: str) -> float | None:
    text = text.strip().lower()
    if text in HUMAN:
        return HUMAN[text]
    try:
        return label_score(text) if text.split()[0] in ("fully", "partially", "not") else None
    except (KeyError, IndexError):
        return None


def agreement(pairs: list[dict]) -> list[dict]:
    """Pearson r per judge and metric, over the labelled judgements and over the answers."""
    out = []
    groups: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for p in pairs:
        groups[(p["judge"], p["metric"])].append(p)
    for (judge, metric), rows in sorted(groups.items()):
        out.append({"judge": judge, "metric": metric, "level": "item", "n": len(rows),
                    "pearson": pearson([r["judge_score"] for r in rows], [r["human_score"] for r in rows])})
        answers: dict[str, list[dict]] = collections.defaultdict(list)
        for r in rows:
            answers[r["response_id"]].append(r)
        means = [(sum(r["judge_score"] for r in a) / len(a), sum(r["human_score"] for r in a) / len(a)) for a in answers.values()]
        out.append({"judge": judge, "metric": metric, "level": "answer", "n": len(means),
                    "pearson": pearson([j for j, _ in means], [h for _, h in means])})
    return out


def run(ctx):
    responses = {r["id"]: r for r in ctx.read_rows("responses")}
    sentences = {(s["response_id"], s["sentence_index"]): s for s in ctx.read_rows("sentences") if (s.get("statement_set") or "strict") == "strict"}
    judgements = {}
    for j in ctx.read_rows("judgements"):
        if j.get("scoring", "strict") == "strict" and j["ok"] and j["kind"] in METRICS:
            if j["score"] is None:  # answered without a score (the table allows it): nothing to compare a human score with
                ctx.stats["unscored_judgements"] += 1
                continue
            judgements[j["id"]] = j
    facts = {f["fact_id"]: f["text"] for f in load_release(release_folder(ctx.input_path("release")))["facts"]}
    sheet = []
    for j in sorted(judgements.values(), key=lambda j: (j["model"], j["response_id"], j["kind"], j["sentence_index"] or -1, j["fact_id"] or "", j["doc_number"] or 0)):
        response = responses.get(j["response_id"]) or {}
        docs = {d["number"]: d for d in response.get("documents") or []}
        sentence = sentences.get((j["response_id"], j["sentence_index"])) or {}
        cited = [j["doc_number"]] if j["kind"] == "support_doc" else sentence.get("cited") or [] if j["kind"] == "support" else []
        shown = " | ".join(f"[{n}] ({docs[n]['modality']}) {docs[n]['text'] or ''}" for n in cited if n in docs)
        sheet.append({"judgement_id": j["id"], "model": j["model"], "instance_id": j["instance_id"], "metric": METRICS[j["kind"]],
                      "question": response.get("question", ""), "statement": facts.get(j["fact_id"], "") if j["kind"] == "completeness" else sentence.get("statement", ""),
                      "answer": response.get("answer", "") if j["kind"] == "completeness" else "", "documents": shown,
                      "human_score": "", "annotator": "", "note": ""})
    write_sheet(ctx.output_path("label_sheet"), SHEET_COLUMNS, sheet)
    ctx.stats["label_sheet_rows"] = len(sheet)
    labelled = []
    if ctx.has_input("labels"):
        for row in read_sheet(ctx.input_path("labels"), "judgement_id", ["human_score"], item=("judgement_id", "annotator")):
            if not row["human_score"]:
                ctx.stats["unlabelled_rows"] += 1
                continue
            with ctx.item(row["judgement_id"]):
                j = judgements.get(row["judgement_id"])
                if j is None:
                    raise Reject("no_judgement", f"line {row['line']}: no answered strict judgement {row['judgement_id']} in this evaluation")
                value = human_score(row["human_score"])
                if value is None:
                    raise Reject("bad_label", f"line {row['line']}: takes 1 / 0.5 / 0 or fully / partially / not, got {row['human_score']!r}")
                labelled.append({"judgement_id": j["id"], "annotator": row.get("annotator") or "", "judge": j["judge"], "model": j["model"],
                                 "response_id": j["response_id"], "metric": METRICS[j["kind"]], "judge_score": j["score"], "human_score": value})
    ctx.write("labels", labelled)
    by_judgement: dict[str, list[dict]] = collections.defaultdict(list)
    for row in labelled:
        by_judgement[row["judgement_id"]].append(row)
    pairs = [{**rows[0], "human_score": sum(r["human_score"] for r in rows) / len(rows)} for _, rows in sorted(by_judgement.items())]
    ctx.write("agreement", agreement(pairs))


STAGE = Stage(
    name="mavis_validate_judge",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("mavis_eval_responses, one file per model", many=True, table="mavis_eval_responses"),
        "sentences": Input("mavis_eval_sentences, one file per model", many=True, table="mavis_eval_sentences"),
        "judgements": Input("mavis_eval_judgements, one file per model", many=True, table="mavis_eval_judgements"),
        "release": Input("MAVIS release manifest JSON, release folder or its benchmark.duckdb (the facts' text)", kind="file"),
        "labels": Input("labelled copy of label_sheet.csv (judgement_id, human_score; annotator optional)", optional=True, kind="file"),
    },
    outputs={
        "labels": Output("mavis_eval_judge_labels", "labelled sheet rows with the judge's score"),
        "agreement": Output("mavis_eval_judge_agreement", "Pearson r of judge and humans per metric and level (Table 6)", counted=False),
        "label_sheet": Output(None, "CSV for human labelling: one row per answered strict judgement, human_score to fill"),
    },
    params={},
    rejects={
        "no_judgement": "the label names no answered strict judgement",
        "bad_label": "the human score is not 1 / 0.5 / 0 or fully / partially / not",
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()

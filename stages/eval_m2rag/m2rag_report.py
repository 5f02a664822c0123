"""The M2RAG evaluation report: every (model, approach) scored with the eight metrics of m2rag.txt
§6 and laid out like its Table 2, plus token use (cf. Table 3), in markdown and a DuckDB file.

Scores (stages.eval_m2rag.m2rag_eval.response_scores, aggregate): every judge score normalised to 0-1.
Text metrics (fluency, relevance, context precision, faithfulness) and image recall are means over
queries; image coherence, helpfulness and reference are means over all output images. Two
aggregations, labelled:
- strict (ours): a failed judge call is missing, never 0; RAGAS
  metrics are missing where RAGAS gives NaN (no context, no statement); image recall is the
  Figure 22 judge's: the images used over those plus the unused ones the judge would insert; the
  overall is the mean of the eight that are defined: a system that output no image has no image
  coherence, helpfulness or reference and its overall is the mean of the other five (column "of").
- reference (M2RAG's public evaluation code, to compare with the paper): every judge score the
  `score` field of the judge's JSON answer clamped to 0-10 (a failed call without a judge's JSON
  answer yields none), faithfulness without statements 1.0 (the public clamp of RAGAS's NaN),
  image recall as the count of input images scored >= 8 that the answer used (1.0 when none is),
  and the overall left undefined (NaN there) when any metric is, e.g. when no image was output.
Both: context precision without contexts is 0 (RAGAS). Each table also has the two lines the
public evaluate.py prints (Text Avg.: the four text metrics; Multi-modal P. Avg.: coherence,
helpfulness, reference). The count version of image recall is printed beside the strict table.
Every number of the results tables has its coverage beside it, "(k/n)": queries or output images
judged (strict, in both tables) of n; "n/a" when none was.
Figure 3: per topic (responses' `topic`), each system's overall over that topic's queries and
their average over the systems, in both modes.

Inputs: responses, judgements (one file per model and approach each).
Outputs: report (markdown), db (DuckDB: responses, judgements, scores (per response, both modes),
summary (per model, approach, mode, metric; also text_average, image_precision_average), topics
(per topic, mode and system: the overall; system "average": Figure 3's value)).
Invariant: the DuckDB file's responses and judgements tables hold every input row (checked on the
written file before it is moved into place); the stage writes no table (0 = 0).
Params: title.
"""
from __future__ import annotations

import json

from stages.eval_m2rag.m2rag_eval import IMAGE_METRICS, METRICS, aggregate, by_topic, response_scores
from stages.core.release import check_row_counts, covered, insert_rows, load_table, md_table, portable_duckdb_file
from stages.core.stage import Input, Output, Param, Stage
from stages.core.tables import atomic_write_bytes

VERSION = "3"  # 2: reference mode as the public evaluator, Figure 3; 3: coverage (k/n) beside every number
LABELS = {"fluency": "Flu.", "relevance": "Rel.", "context_precision": "CP.", "faithfulness": "Faith.", "image_coherence": "Coher.",
          "image_helpfulness": "Help.", "image_reference": "Ref.", "image_recall": "Recall"}
NOTES = {
    "strict": "Strict (ours): a failed judge call is missing, never 0; \"(k/n)\" beside a number: k queries or images scored of n. "
              "Faith. without statements is missing (RAGAS NaN), CP. without contexts 0 (RAGAS). Recall is the Figure 22 judge's. "
              "Overall = mean of the eight metrics that are defined; a system that output no image has no Coher./Help./Ref. and its "
              "overall is the mean of the other five (column \"of\"). Text avg. and Img. P. avg. (the lines the public evaluate.py "
              "prints) are means of the defined metrics of each group.",
    "reference": "Reference-compatible (M2RAG's public evaluate.py and evaluator): each judge score is the `score` field of the "
                 "judge's JSON answer clamped to 0-10, then /10 (a score of 12 is 1.0); a call that failed without a judge's JSON "
                 "answer yields no score (missing, as in strict). Faith. without statements is 1.0 (the public code clamps RAGAS's "
                 "NaN to 1), CP. without contexts 0. Recall = the share of the input images scored >= 8 that the answer used, 1.0 "
                 "when no input image is scored >= 8. The overall, Text avg. and Img. P. avg. are undefined (n/a) when any of their "
                 "metrics is, e.g. with no output image (numpy's NaN).",
}


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def cell(agg: dict, strict: dict, metric: str, responses: int) -> str:
    """A mean with its coverage, judged / total, from the strict aggregation in both modes (a failed
    judge call is missing there; the reference mode may read a number out of it): total is the
    system's responses for a text metric and recall, its output images for an image metric."""
    total = strict["output_images"] if metric in IMAGE_METRICS else responses
    return covered(None if agg[metric] is None else fmt(agg[metric]), total - strict[f"{metric}_missing"], total)


def run(ctx):
    responses = ctx.read_rows("responses")
    judgements: dict[str, list[dict]] = {}
    for j in ctx.read_rows("judgements"):
        judgements.setdefault(j["response_id"], []).append(j)
    systems: dict[tuple[str, str], list[dict]] = {}
    topics: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    score_rows = []
    for r in responses:
        scores = response_scores(r, judgements.get(r["id"], []))
        systems.setdefault((r["model"], r["approach"]), []).append(scores)
        topics.setdefault((r["model"], r["approach"]), []).append((r.get("topic") or "(no topic)", scores))
        score_rows.append({"response_id": r["id"], "model": r["model"], "approach": r["approach"], "query_id": r["query_id"],
                           "output_images": len(r["output_images"]), "unresolved": len(r["unresolved"]),
                           "strict_json": json.dumps(scores["strict"]), "reference_json": json.dumps(scores["reference"])})
    summary = {(m, a, mode): aggregate(rows, mode) for (m, a), rows in sorted(systems.items()) for mode in ("strict", "reference")}
    loaded: dict[str, int] = {}
    with portable_duckdb_file(ctx.output_path("db"), check=lambda tmp: check_row_counts(tmp, loaded)) as con:
        for name in ("responses", "judgements"):
            loaded[name] = load_table(con, name, ctx.read(name))
        con.execute("create table scores (response_id varchar, model varchar, approach varchar, query_id varchar, output_images int, "
                    "unresolved int, strict json, reference json)")
        insert_rows(con, "insert into scores values (?, ?, ?, ?, ?, ?, ?, ?)", [list(s.values()) for s in score_rows])
        con.execute("create table summary (model varchar, approach varchar, scoring varchar, metric varchar, value double, missing int)")
        con.execute("create table topics (topic varchar, scoring varchar, model varchar, approach varchar, overall double)")
        insert_rows(con, "insert into topics values (?, ?, ?, ?, ?)", [
            [topic, mode, *system, value] for mode in ("strict", "reference") for topic, entry in by_topic(topics, mode).items()
            for system, value in [*entry["systems"].items(), (("average", None), entry["average"])]])
        insert_rows(con, "insert into summary values (?, ?, ?, ?, ?, ?)", [
            [m, a, mode, metric, value, agg.get(f"{metric}_missing", 0)]
            for (m, a, mode), agg in summary.items() for metric, value in agg.items() if not metric.endswith("_missing")])
        usage = con.execute(
            "select model, approach, count(*), sum(calls), avg(prompt_tokens), avg(completion_tokens), sum(truncated_calls), "
            "sum(len(output_images)), sum(len(unresolved)), bool_or(vision) from responses group by all order by 1, 2").fetchall()
        failed = dict(((m, a), n) for m, a, n in con.execute(
            "select model, approach, count(*) from judgements where status = 'failed' group by all").fetchall())
        modes = dict(((m, a, mode), n) for m, a, mode, n in con.execute(
            "select model, approach, mode, count(*) from judgements where metric like 'image%' group by all").fetchall())
    tables = []
    for mode in ("strict", "reference"):
        headers = ["Model", "Approach", *LABELS.values(), "Overall", "of", "Text avg.", "Img. P. avg."] + (
            ["Recall (count >= 8)"] if mode == "strict" else [])
        rows = []
        for (m, a, md), agg in summary.items():
            if md != mode:
                continue
            strict, n = summary[(m, a, "strict")], len(systems[(m, a)])
            rows.append([m, a, *[cell(agg, strict, k, n) for k in METRICS], fmt(agg["overall"]), agg["overall_over"],
                         fmt(agg["text_average"]), fmt(agg["image_precision_average"])]
                        + ([cell(agg, strict, "image_recall_count", n)] if mode == "strict" else []))
        tables += [f"## Results (cf. Table 2), {mode} scoring", NOTES[mode], md_table(headers, rows)]
    systems_order = sorted(systems)
    for mode in ("strict", "reference"):
        per_topic = by_topic(topics, mode)
        tables += [f"## Overall score by topic (cf. Figure 3), {mode} scoring",
                   "Per topic (the category a query was sampled for), each system's overall over that topic's queries and their "
                   "average over the systems (Figure 3 plots the average).",
                   md_table(["Topic", *[f"{m} / {a}" for m, a in systems_order], "Average"],
                            [[topic, *[fmt(entry["systems"].get(s)) for s in systems_order], fmt(entry["average"])]
                             for topic, entry in sorted(per_topic.items())])]
    markdown = "\n\n".join([
        f"# {ctx.params['title']}",
        "Metrics of m2rag.txt §6 (App. D), each a judge score normalised to 0-1. Flu. fluency, Rel. relevance (Figures 17-18, on the "
        "answer without image placeholders), CP. context precision and Faith. faithfulness as RAGAS defines them (contexts: the pages' "
        "selected text and the captions of the answer's images), Coher./Help./Ref. image coherence, helpfulness and reference "
        "(Figures 19-21, one judgement per output image with the text above and below it), Recall image recall (Figure 22). Text "
        "metrics and recall are means over queries; image metrics are means over all output images. \"(k/n)\" beside every "
        "number: k queries (text metrics, recall) or output images (image metrics) judged, from the strict scoring in both "
        "tables (a failed judge call is missing there), of n; \"n/a\" when none was, never the number a parser reads out of a "
        "failed answer.",
        *tables,
        "## Responses and token use (cf. Table 3)",
        md_table(["Model", "Approach", "Responses", "Calls", "Prompt tokens / response", "Completion tokens / response", "Truncated calls",
                  "Output images", "Placeholders to no image", "Vision", "Failed judge calls", "Images judged by caption"],
                 [[m, a, n, calls, f"{p or 0:.0f}", f"{c or 0:.0f}", trunc, out, unres, vis, failed.get((m, a), 0), modes.get((m, a, "caption"), 0)]
                  for m, a, n, calls, p, c, trunc, out, unres, vis in usage]),
        "Placeholders to no image name no input image (`image_99`, a url): they are left out of every metric. Images judged by "
        "caption: the judge could not see the image (text-only judge, or no released file) and read its caption.",
    ]) + "\n"
    atomic_write_bytes(ctx.output_path("report"), markdown.encode())


STAGE = Stage(
    name="m2rag_report",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("m2rag_responses, one file per model and approach", many=True, table="m2rag_responses"),
        "judgements": Input("m2rag_judgements, one file per model and approach", many=True, table="m2rag_judgements"),
    },
    outputs={"report": Output(None, "markdown report"), "db": Output(None, "DuckDB file with the evaluation tables")},
    params={"title": Param(str, "M2RAG evaluation", "report heading")},
    run=run,
    rejects={},
)

if __name__ == "__main__":
    STAGE.main()

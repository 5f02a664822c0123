"""Score the attributions (cite-while-you-generate.txt §4.2 metrics, §4.3, Tables 2-3).

Per summary sentence with a reference, the predicted sources of each method (attention, embedding,
self) against the reference: text F1 and exact match of the sentence-id sets, image accuracy
(whether IMG is cited agrees with the reference) and joint exact match (sentence ids and IMG) on
generations with the image as evidence (stages/core/attribution.py: the definitions where the
seed is silent). Macro F1 is the mean of the per-sentence F1 over all scored sentences of a
(model, mode, method); EM, image accuracy and joint EM likewise, in percent. Summary quality:
ROUGE-1 and ROUGE-L F (rouge-score, stemmed) of each generation against the item's reference
summary, when the item has one. A sentence a method did not attribute (its generation was
rejected there) counts as citing nothing. Silver references are counted in every row.

Inputs: citations (attr_citations, one file per method), references (attr_references),
generations (attr_generations), source_items (attr_items). Outputs: scores (attr_scores, one row per
generation and method), summary (attr_summary, not counted), report (Markdown, not counted).
Invariant: every generation and method is scored (no rejects: a generation without references is
scored on 0 sentences).
"""
from __future__ import annotations

import collections
from pathlib import Path
from statistics import mean

from stages.core.attribution import rouge, sentence_scores
from stages.core.release import covered
from stages.core.stage import Input, Output, Stage
from stages.core.tables import atomic_write_bytes

VERSION = "2"  # 2: the report shows coverage (k/n) beside every number
METRICS = ("text_f1", "text_em", "image_acc", "joint_em")


def score_generation(gen: dict, method: str, predicted: dict[int, list[str]], references: dict[int, dict]) -> tuple[dict, list[dict]]:
    per_sentence = []
    for j, ref in sorted(references.items()):
        row = sentence_scores(predicted.get(j, []), ref["sources"], gen["has_image"])
        row["silver"] = ref["origin"] == "silver"
        per_sentence.append(row)

    def pct(metric):
        values = [r[metric] for r in per_sentence if r[metric] is not None]
        return round(100 * mean(values), 4) if values else None

    return {
        "id": f"score:{method}:{gen['id']}", "generation_id": gen["id"], "item_id": gen["item_id"], "model": gen["model"],
        "mode": gen["mode"], "method": method, "sentences": len(per_sentence), "silver": sum(r["silver"] for r in per_sentence),
        **{m: pct(m) for m in METRICS},
    }, per_sentence


def summarise(groups: dict, rouge_rows: dict) -> list[dict]:
    out = []
    for (model, mode, method), sentences in sorted(groups.items()):
        silver = sum(s["silver"] for s in sentences)
        for metric in METRICS:
            values = [s[metric] for s in sentences if s[metric] is not None]
            out.append({"model": model, "mode": mode, "method": method, "metric": metric,
                        "value": round(100 * mean(values), 4) if values else None, "n": len(values), "silver": silver})
        for metric in ("rouge1", "rougeL"):
            values = [r[metric] for r in rouge_rows.get((model, mode), [])]
            out.append({"model": model, "mode": mode, "method": method, "metric": metric,
                        "value": round(mean(values), 4) if values else None, "n": len(values), "silver": 0})
    return out


def report(summary: list[dict], stats: collections.Counter, generations: collections.Counter) -> str:
    """Table 2/3 with each number's coverage beside it, "(k/n)": of a method's n summary sentences
    with a reference the k it is a mean over (image metrics: sentences of generations with the
    image), of a model and mode's n generations the k with a reference summary (ROUGE); "n/a" when k is 0."""
    cells = {(r["model"], r["mode"], r["method"], r["metric"]): r for r in summary}
    keys = sorted({(r["model"], r["mode"], r["method"]) for r in summary})

    def fmt(key, metric):
        r = cells.get((*key, metric))
        if r is None:
            return "-"
        total = generations[key[:2]] if metric in ("rouge1", "rougeL") else cells[(*key, "text_f1")]["n"]
        return covered(None if r["value"] is None else f"{r['value']:.2f}", r["n"], total)

    lines = [
        "# Attribution while generating (cite-while-you-generate)", "",
        "Table 2's metrics (percent, means over summary sentences with a reference) and Table 3's ROUGE (0-1). Beside every "
        "number its coverage, \"(k/n)\": the k sentences (ROUGE: generations with a reference summary) it is a mean over, "
        "of n; \"n/a\" when k is 0.",
        f"References: {stats['references_file']} gold sentences from the items file, {stats['references_silver']} silver "
        "sentences from the judge (App. E prompt); `silver` counts them per row.", "",
        "| model | mode | method | sentences | silver | text F1 | text EM | image acc | joint EM | ROUGE-1 | ROUGE-L |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        n = cells[(*key, "text_f1")]
        lines.append(f"| {' | '.join(key)} | {n['n']} | {n['silver']} | " + " | ".join(fmt(key, m) for m in (*METRICS, "rouge1", "rougeL")) + " |")
    return "\n".join(lines) + "\n"


def run(ctx):
    gens = ctx.read_rows("generations")
    items = {r["id"]: r for r in ctx.read_rows("source_items")}
    predicted: dict[tuple[str, str], dict[int, list[str]]] = collections.defaultdict(dict)
    methods: set[str] = set()
    for row in ctx.read_rows("citations"):
        predicted[(row["method"], row["generation_id"])][row["sentence_index"]] = row["sources"]
        methods.add(row["method"])
    references: dict[str, dict[int, dict]] = collections.defaultdict(dict)
    for row in ctx.read_rows("references"):
        references[row["generation_id"]][row["sentence_index"]] = row
        ctx.stats[f"references_{row['origin']}"] += 1
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    rouge_rows: dict[tuple, list[dict]] = collections.defaultdict(list)
    for gen in gens:
        ref_summary = (items.get(gen["item_id"]) or {}).get("reference_summary")
        quality = rouge(gen["summary"], ref_summary) if ref_summary else {"rouge1": None, "rougeL": None}
        if ref_summary:
            rouge_rows[(gen["model"], gen["mode"])].append(quality)
        for method in sorted(methods):
            with ctx.item(f"{method}:{gen['id']}"):
                row, per_sentence = score_generation(gen, method, predicted.get((method, gen["id"]), {}), references[gen["id"]])
                groups[(gen["model"], gen["mode"], method)].extend(per_sentence)
                ctx.write("scores", [{**row, **quality}])
    summary = summarise(groups, rouge_rows)
    ctx.write("summary", summary)
    generations = collections.Counter((g["model"], g["mode"]) for g in gens)
    atomic_write_bytes(Path(ctx.output_path("report")), report(summary, ctx.stats, generations).encode())


STAGE = Stage(
    name="score_attribution",
    version=VERSION,
    doc=__doc__,
    inputs={
        "citations": Input("attr_citations of every method", many=True, table="attr_citations"),
        "references": Input("attr_references from attribution_references", table="attr_references"),
        "generations": Input("attr_generations from generate_attributed", table="attr_generations"),
        "source_items": Input("attr_items (reference summaries)", table="attr_items"),
    },
    outputs={
        "scores": Output("attr_scores", "one row per generation and method"),
        "summary": Output("attr_summary", "means per model, mode and method", counted=False),
        "report": Output(None, "report.md: the Table 2/3 layout", counted=False),
    },
    params={},
    run=run,
)

if __name__ == "__main__":
    STAGE.main()

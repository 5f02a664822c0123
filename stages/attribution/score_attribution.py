"""Score the attributions (cite-while-you-generate.txt §4.2 metrics, §4.3, Tables 2-3).

Per summary sentence with a reference, the predicted sources of each method (attention, embedding,
self) against the reference: text F1 and exact match of the sentence-id sets, image accuracy
(whether IMG is cited agrees with the reference) and joint exact match (sentence ids and IMG) on
generations with the image as evidence (stages/attribution/attribution.py: the definitions where the
seed is silent). Macro F1 is the mean of the per-sentence F1 over all scored sentences of a
(model, mode, method); EM, image accuracy and joint EM likewise, in percent. The methods are those
of the citations files: attention (majority voting), attention_max (Table 4's "max" ablation),
embedding, self. A sentence a method did not attribute (its generation was rejected there) counts
as citing nothing. Silver references are counted in every row.

Summary quality (Table 3), of each generation against the item's reference summary when the item
has one: ROUGE-1 and ROUGE-L F (rouge-score, stemmed) and BERTScore F1 (the bert-score package:
greedy matching of hidden states, no idf, no baseline rescaling). BERTScore needs model weights:
`bertscore_model` names a local model folder; by default `models/roberta-large` (the seed reports
BERTScore-F1 without naming its model: bert-score's English default is roberta-large, whose layer
17 it uses, `bertscore_layers`); a folder that is not there stops the stage naming it; empty turns
BERTScore off (the demo: no weights offline) and the report says n/a and why.

Inputs: citations (attr_citations, one file per method), references (attr_references),
generations (attr_generations), source_items (attr_items). Outputs: scores (attr_scores, one row per
generation and method), summary (attr_summary, not counted), report (Markdown, not counted).
Invariant: every generation and method is scored (no rejects: a generation without references is
scored on 0 sentences).
Params: bertscore_model, bertscore_layers.
"""
from __future__ import annotations

import collections
from pathlib import Path
from statistics import mean

from stages.attribution.attribution import bertscore_f1, rouge, sentence_scores
from stages.core.release import covered
from stages.core.stage import Input, Output, Param, Stage, StageError
from stages.core.tables import atomic_write_bytes

VERSION = "3"  # 2: BERTScore-F1; 3: the report shows coverage (k/n) beside every number
METRICS = ("text_f1", "text_em", "image_acc", "joint_em")
QUALITY = ("rouge1", "rougeL", "bertscore_f1")
BERTSCORE_OFF = "n/a: no local model folder given (score_attribution.bertscore_model)"


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
        for metric in QUALITY:
            values = [r[metric] for r in rouge_rows.get((model, mode), []) if r[metric] is not None]
            out.append({"model": model, "mode": mode, "method": method, "metric": metric,
                        "value": round(mean(values), 4) if values else None, "n": len(values), "silver": 0})
    return out


def report(summary: list[dict], stats: collections.Counter, bertscore: str, generations: collections.Counter) -> str:
    """Table 2/3 with each number's coverage beside it, "(k/n)": of a method's n summary sentences
    with a reference the k it is a mean over (image metrics: sentences of generations with the
    image), of a model and mode's n generations the k with a reference summary (ROUGE, BERTScore);
    "n/a" when k is 0 (BERTScore turned off included)."""
    cells = {(r["model"], r["mode"], r["method"], r["metric"]): r for r in summary}
    keys = sorted({(r["model"], r["mode"], r["method"]) for r in summary})

    def fmt(key, metric):
        r = cells.get((*key, metric))
        if r is None:
            return "-"
        total = generations[key[:2]] if metric in QUALITY else cells[(*key, "text_f1")]["n"]
        value = None if r["value"] is None else f"{r['value']:.3f}" if metric in QUALITY else f"{r['value']:.2f}"
        return covered(value, r["n"], total)

    lines = [
        "# Attribution while generating (cite-while-you-generate)", "",
        "Table 2's metrics (percent, means over summary sentences with a reference) and Table 3's summary quality "
        "(ROUGE-1, ROUGE-L, BERTScore-F1; 0-1). Methods: attention = majority voting (Algorithm 1), attention_max = the "
        "\"max\" ablation of Table 4 (each token to the sentence of its single most attended token), embedding, self.",
        "Beside every number its coverage, \"(k/n)\": the k sentences (ROUGE, BERTScore: generations with a reference "
        "summary) it is a mean over, of n; \"n/a\" when k is 0.",
        f"BERTScore: {bertscore}.",
        f"References: {stats['references_file']} gold sentences from the items file, {stats['references_silver']} silver "
        "sentences from the judge (App. E prompt); `silver` counts them per row.", "",
        "| model | mode | method | sentences | silver | text F1 | text EM | image acc | joint EM | ROUGE-1 | ROUGE-L | BERTScore-F1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        n = cells[(*key, "text_f1")]
        lines.append(f"| {' | '.join(key)} | {n['n']} | {n['silver']} | " + " | ".join(fmt(key, m) for m in (*METRICS, *QUALITY)) + " |")
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
    ref_summaries = {g["id"]: (items.get(g["item_id"]) or {}).get("reference_summary") for g in gens}
    bert = bertscores(ctx, [g for g in gens if ref_summaries[g["id"]]], ref_summaries)
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    rouge_rows: dict[tuple, list[dict]] = collections.defaultdict(list)
    for gen in gens:
        ref_summary = ref_summaries[gen["id"]]
        quality = {**rouge(gen["summary"], ref_summary), "bertscore_f1": bert.get(gen["id"])} if ref_summary else dict.fromkeys(QUALITY)
        if ref_summary:
            rouge_rows[(gen["model"], gen["mode"])].append(quality)
        for method in sorted(methods):
            with ctx.item(f"{method}:{gen['id']}"):
                row, per_sentence = score_generation(gen, method, predicted.get((method, gen["id"]), {}), references[gen["id"]])
                groups[(gen["model"], gen["mode"], method)].extend(per_sentence)
                ctx.write("scores", [{**row, **quality}])
    summary = summarise(groups, rouge_rows)
    ctx.write("summary", summary)
    model = ctx.params["bertscore_model"]
    said = f"bert-score with {Path(model).name}, layer {ctx.params['bertscore_layers']}" if model else BERTSCORE_OFF
    generations = collections.Counter((g["model"], g["mode"]) for g in gens)
    atomic_write_bytes(Path(ctx.output_path("report")), report(summary, ctx.stats, said, generations).encode())


def bertscores(ctx, gens: list[dict], ref_summaries: dict[str, str]) -> dict[str, float]:
    """Generation id -> BERTScore F1 against its reference summary; empty when turned off."""
    model = ctx.params["bertscore_model"]
    if not model or not gens:
        return {}
    if not Path(model, "config.json").is_file():
        raise StageError(f"bertscore_model {model}: not a local model folder (no config.json); put a copy of roberta-large's "
                         "files there, or set attribution.score_attribution.bertscore_model: '' to report BERTScore as n/a")
    f1 = bertscore_f1([g["summary"] for g in gens], [ref_summaries[g["id"]] for g in gens], model, ctx.params["bertscore_layers"])
    ctx.stats["bertscore_pairs"] = len(f1)
    return dict(zip((g["id"] for g in gens), f1))


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
    params={
        "bertscore_model": Param(str, "models/roberta-large", "local model folder for BERTScore-F1 (Table 3; bert-score's English "
                                                               "default, roberta-large); empty: off, reported as n/a"),
        "bertscore_layers": Param(int, 17, "hidden layer BERTScore reads (bert-score's default for roberta-large: 17)", min=1),
    },
    run=run,
    rejects={},  # a generation without references is scored on 0 sentences
)

if __name__ == "__main__":
    STAGE.main()

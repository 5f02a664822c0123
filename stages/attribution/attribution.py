"""Algorithm 1 of cite-while-you-generate.txt (§3.2-3.3) on captured attention, its "max" ablation
(§5.2.1, Table 4), its metrics (§4.2, Tables 2-3) and the App. E answer format: pure functions,
shared by the attribution stages.

Evidence units are named by strings: a source sentence by its index ("0", "1", ...), the image by
"IMG". A generation's `units` list names the unit behind each source label (stages/attribution/attention.py
labels every source token with an index into `units`, or IMAGE for the image-token block).

Token-to-sentence rule (`aggregation`): "majority" (Algorithm 1, the method) takes the majority
sentence of a token's top-k attended text tokens; "max" (§5.2.1's ablation, Table 4) takes the
sentence of its single most attended text token: the majority over the top 1, whatever k.
The sentence threshold τ applies to both. The seed's Table 4 prints one "max" figure for every τ
and nearly one for every k, which its own description does not produce; we follow the description.

Choices where the seed is silent or disagrees with itself:
- Majority vote ties (two sentences with equally many of the top-k tokens): the sentence whose
  tied tokens hold the larger attention sum wins, then the earlier sentence.
- The top-k tokens are text tokens only (Algorithm 1's topk_text): image tokens never vote.
- τ threshold: a sentence of |T| tokens cites unit i when at least ceil(τ·|T|) of its tokens voted
  for i (Algorithm 1's count form; the §3.2 fraction form is the same). ceil is taken with a 1e-9
  tolerance so τ·|T| that is an integer in exact arithmetic is not pushed up by rounding.
- IMG_RAW: the seed's text sums each token's attention over the image tokens, its Algorithm 1
  takes the mean. Within one item both rank the summary sentences identically (the image block has
  one length), so the cited sentence is the same; we use the SUM (the image's attention share of the
  token), which is comparable across items and is what the report prints.
- A summary sentence without tokens (empty) cites nothing and never receives the image.
- Metrics: per summary sentence, text F1 between predicted and reference sets of sentence ids
  (both empty: 1; one empty: 0); macro F1 = mean over sentences; exact match = equal text sets;
  image accuracy = per sentence, "IMG cited" agrees with the reference; joint EM = equal sets with
  the image. Means are over all summary sentences of the evaluated generations.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np

from stages.core.images import normalize_image
from stages.core.llm import LLMRequest
from stages.core.stage import Reject

IMG = "IMG"
IMAGE_LABEL = -1
# a sentence ends at . ! ? (maybe closed by a quote or bracket) before a space and a capital, digit,
# quote or bracket ("3.5 mg" and "e.g. the" do not end one), and at every line break
_BOUNDARY = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))[ \t]+(?=[A-Z0-9\"'(\[<])|[ \t]*\n\s*")
_PLACEHOLDER = "<image>"


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of `text`, surrounding white space left out."""
    spans, start = [], 0
    for m in [*_BOUNDARY.finditer(text), None]:
        end = m.start() if m else len(text)
        a, b = start, end
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            spans.append((a, b))
        start = m.end() if m else end
    return spans


def split_sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text)]


def split_source(text: str) -> tuple[list[str], int | None]:
    """Source sentences and where the image placeholder `<image>` stood (how many sentences precede
    it; None without one). The placeholder is not a sentence."""
    if text.count(_PLACEHOLDER) > 1:
        raise ValueError("the source holds more than one <image> placeholder")
    before, sep, after = text.partition(_PLACEHOLDER)
    first = split_sentences(before)
    return (first + split_sentences(after), len(first) if sep else None)


def token_sentences(token_spans: list[tuple[int, int]], sentence_spans_: list[tuple[int, int]]) -> list[int]:
    """Per generated token, the summary sentence it overlaps most (-1: none, e.g. a line break)."""
    out = []
    for a, b in token_spans:
        best, best_len = -1, 0
        for j, (s, e) in enumerate(sentence_spans_):
            overlap = min(b, e) - max(a, s)
            if overlap > best_len:
                best, best_len = j, overlap
        out.append(best)
    return out


def token_votes(pooled: np.ndarray, labels: np.ndarray, k: int) -> list[int | None]:
    """Algorithm 1 per token: the majority label among the top-k attended text tokens (None when
    the source has no text token). `pooled` [tokens, source], `labels` [source] (IMAGE_LABEL = image)."""
    labels = np.asarray(labels)
    text = np.flatnonzero(labels != IMAGE_LABEL)
    votes: list[int | None] = []
    for row in np.asarray(pooled, dtype=np.float64):
        if text.size == 0:
            votes.append(None)
            continue
        scores = row[text]
        top = text[np.argsort(-scores, kind="stable")[: min(k, text.size)]]
        counts = Counter(int(labels[i]) for i in top)
        best = max(counts.values())
        tied = [lab for lab, c in counts.items() if c == best]
        mass = {lab: float(sum(row[i] for i in top if labels[i] == lab)) for lab in tied}
        votes.append(min(tied, key=lambda lab: (-mass[lab], lab)))
    return votes


def threshold_count(tau: float, n_tokens: int) -> int:
    return max(1, math.ceil(tau * n_tokens - 1e-9))


def sentence_citations(votes: list[int | None], token_sentence: list[int], n_sentences: int, tau: float) -> list[list[int]]:
    """Per summary sentence j: every label voted for by >= ceil(τ·|T_j|) of its tokens, in label order."""
    by_sentence: list[list[int | None]] = [[] for _ in range(n_sentences)]
    for vote, j in zip(votes, token_sentence):
        if 0 <= j < n_sentences:
            by_sentence[j].append(vote)
    out = []
    for tokens in by_sentence:
        need = threshold_count(tau, len(tokens))
        counts = Counter(v for v in tokens if v is not None)
        out.append(sorted(lab for lab, c in counts.items() if tokens and c >= need))
    return out


def image_shares(pooled: np.ndarray, labels: np.ndarray) -> np.ndarray | None:
    """Per token, its attention summed over the image tokens (None when there is no image block)."""
    image = np.flatnonzero(np.asarray(labels) == IMAGE_LABEL)
    if image.size == 0:
        return None
    return np.asarray(pooled, dtype=np.float64)[:, image].sum(axis=1)


def image_sentence(shares: np.ndarray, token_sentence: list[int], n_sentences: int) -> tuple[int | None, list[float | None]]:
    """IMG_RAW: the summary sentence with the highest mean image share (ties: the earlier one), and
    every sentence's mean (None for a sentence without tokens)."""
    sums, counts = [0.0] * n_sentences, [0] * n_sentences
    for share, j in zip(shares, token_sentence):
        if 0 <= j < n_sentences:
            sums[j] += float(share)
            counts[j] += 1
    means = [sums[j] / counts[j] if counts[j] else None for j in range(n_sentences)]
    scored = [(m, j) for j, m in enumerate(means) if m is not None]
    if not scored:
        return None, means
    return min(scored, key=lambda mj: (-mj[0], mj[1]))[1], means


def attribute(pooled: np.ndarray, labels: np.ndarray, units: list[str], token_sentence: list[int], n_sentences: int,
              k: int, tau: float, mode: str, aggregation: str = "majority") -> tuple[list[list[str]], list[float | None]]:
    """Algorithm 1 for one generation: per summary sentence its cited units ("0".., "IMG"), and
    (IMG_RAW) each sentence's mean image share. In IMG_CAP the caption's unit is already named IMG."""
    votes = token_votes(pooled, labels, 1 if aggregation == "max" else k)
    cited = [[units[lab] for lab in labs] for labs in sentence_citations(votes, token_sentence, n_sentences, tau)]
    means: list[float | None] = [None] * n_sentences
    if mode == "img_raw":
        shares = image_shares(pooled, labels)
        if shares is not None:
            best, means = image_sentence(shares, token_sentence, n_sentences)
            if best is not None:
                cited[best].append(IMG)
    return [order_units(c) for c in cited], means


def order_units(units: list[str]) -> list[str]:
    """Distinct units, sentence ids ascending, IMG last."""
    uniq = set(units)
    return sorted((u for u in uniq if u != IMG), key=int) + ([IMG] if IMG in uniq else [])


# ---- App. E answer (schemas/answers/attribution_cite.schema.json) -----------------------------
def parse_attribution(answer: dict, n_generated: int, n_source: int, image: bool) -> list[list[str]]:
    """The units of every summary sentence from an App. E answer; ValueError names what is wrong
    (a missing sentence, an unknown id, IMG without an image). A sentence listed twice keeps its
    first entry. Summary sentences numbered 1..n (and no 0) are read as 1-based: the only reading
    under which every sentence is there."""
    entries = answer["attributions"]
    numbers = {e["sentence"] for e in entries}
    shift = 1 if n_generated and 0 not in numbers and numbers == set(range(1, n_generated + 1)) else 0
    found: dict[int, list[str]] = {}
    for entry in entries:
        j = entry["sentence"] - shift
        units = []
        for part in entry["sources"]:
            if part == IMG:
                if not image:
                    raise ValueError(f"sentence {j} cites IMG but the item has no image")
                units.append(IMG)
            elif isinstance(part, int) and part < n_source:
                units.append(str(part))
            else:
                raise ValueError(f"sentence {j} cites {part!r}, not a source id 0-{n_source - 1}" + (" or IMG" if image else ""))
        found.setdefault(j, units)
    missing = [j for j in range(n_generated) if j not in found]
    if missing:
        raise ValueError(f"no entry for summary sentence(s) {missing}")
    return [order_units(found[j]) for j in range(n_generated)]


# ---- metrics (§4.2) ---------------------------------------------------------------------------
def text_f1(predicted: list[str], reference: list[str]) -> float:
    p = {u for u in predicted if u != IMG}
    r = {u for u in reference if u != IMG}
    if not p and not r:
        return 1.0
    hit = len(p & r)
    if not hit:
        return 0.0
    precision, recall = hit / len(p), hit / len(r)
    return 2 * precision * recall / (precision + recall)


def sentence_scores(predicted: list[str], reference: list[str], image: bool) -> dict:
    """One summary sentence's scores; the image ones are None when the item has no image."""
    p_text = {u for u in predicted if u != IMG}
    r_text = {u for u in reference if u != IMG}
    return {
        "text_f1": text_f1(predicted, reference),
        "text_em": float(p_text == r_text),
        "image_acc": float((IMG in predicted) == (IMG in reference)) if image else None,
        "joint_em": float(set(predicted) == set(reference)) if image else None,
    }


def rouge(summary: str, reference: str) -> dict:
    """ROUGE-1 and ROUGE-L F-measures (Table 3), stemmed."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    scores = scorer.score(reference, summary)
    return {"rouge1": scores["rouge1"].fmeasure, "rougeL": scores["rougeL"].fmeasure}


def bertscore_f1(summaries: list[str], references: list[str], model: str, layers: int) -> list[float]:
    """BERTScore F1 (Table 3) of each summary against its reference with the bert-score package:
    greedy matching of the `layers`-th hidden states of a local model folder, no idf weighting, no
    baseline rescaling (the package's defaults; for roberta-large it uses layer 17)."""
    from bert_score import BERTScorer

    scorer = BERTScorer(model_type=model, num_layers=layers)
    _, _, f1 = scorer.score(summaries, references)
    return [float(v) for v in f1]


def normalise(sentence: str) -> str:
    """How a reference sentence from a file is matched to a generated one."""
    return " ".join(re.sub(r"[^\w\s]", " ", sentence.lower()).split())


def cite_variables(gen: dict, item: dict | None, attached: bool = False) -> tuple[dict, list[str]]:
    """Variables of prompts/attribution_cite.md for one generation, and the unit of each listed
    source sentence (an img_cap caption is not listed: the image is its own element). `attached`:
    the image itself goes with the prompt (a model that takes images)."""
    pairs = [(u, s) for u, s in zip(gen["units"], gen["source_sentences"]) if u != IMG]
    image = bool(gen["has_image"])
    described = (item or {}).get("image_description") or gen.get("caption")
    description = described or ("the attached image" if attached else "(no description given)")
    position = (item or {}).get("image_position")
    return {
        "image": image, "image_description": description,
        "image_position": position if position is not None else len(pairs),
        "source": [s for _, s in pairs], "summary": list(gen["summary_sentences"]),
    }, [u for u, _ in pairs]


IMAGE_UNREADABLE = {"image_unreadable": "the item's image file cannot be read or decoded (a model that takes images is sent it)"}
MAX_PIXELS = 64_000_000  # as cache_images' default: refused from the header, before decoding


def cite_images(gen: dict, item: dict | None, store, vision: bool) -> list[str]:
    """App. E gives the annotator "one associated image": the item's image, put in the model
    layer's image store (as JPEG, PNG, GIF or WebP: what every backend takes), for a generation with
    the image and a model that takes images; a file that cannot be read or decoded is the
    generation's Reject."""
    if not (vision and gen["has_image"] and item and item.get("image")):
        return []
    path = Path(item["image"])
    try:
        image = normalize_image(path.read_bytes(), MAX_PIXELS)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise Reject("image_unreadable", f"{path!s:.300}: {getattr(err, 'strerror', None) or err}") from None
    except Reject as bad:
        raise Reject("image_unreadable", f"{path!s:.300}: {bad.reason}: {bad.detail}") from None
    return [store.put(image.data, image.ext)]


def cite_request(gen: dict, item: dict | None, store, vision: bool, max_tokens: int) -> tuple[LLMRequest, list[str]]:
    """App. E's question for one generation (prompts/attribution_cite.md, its image attached when
    the model takes images) and the unit of each listed source sentence; raises the generation's
    Reject (image_unreadable)."""
    images = cite_images(gen, item, store, vision)
    variables, units = cite_variables(gen, item, attached=bool(images))
    shape = (len(variables["summary"]), len(variables["source"]), variables["image"])
    return LLMRequest(id=gen["id"], prompt="attribution_cite", variables=variables, images=images,
                      sampling={"max_tokens": max_tokens} if max_tokens else None,
                      parse=lambda text: parse_attribution(text, *shape)), units


def every_generation(ctx) -> str | None:
    """The invariant of the stages that attribute one generation at a time: generations in =
    generations attributed (stat `generations_attributed`) + rejected."""
    done = ctx.stats["generations_attributed"]
    if ctx.rows_in != done + ctx.rejected:
        return f"generations in {ctx.rows_in} != attributed {done} + rejected {ctx.rejected}"
    return None

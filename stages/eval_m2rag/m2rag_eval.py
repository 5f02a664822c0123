"""M2RAG evaluation helpers shared by the stages of stages/eval_m2rag (m2rag.txt §3, §5, §6, App. D-E).

- Reading a release: this run's manifest or a released folder (`parquet/` tables, `images/<sha256>.*`).
  A release without `aux_images` or without `caption` columns on `images` is read as having no
  auxiliary images and images captioned by their alt text (`caption_mode` "alt"). M2RAG's own
  published benchmark (M2RAG-Bench's `dev_set.jsonl`) reads as the same tables (`read_dev_set`).
- Input selection (App. E): per page the top `text_per_page` pieces by score (at least
  `min_text_score`), kept in page order; the images scored at least `min_image_score`: each page's
  best `max_page_images`, the best `max_aux_images` auxiliary ones, then the best `max_images` of
  those (the public code's reading of App. E's "web page specific images restricted to 5").
- Placeholders (§3): an image in an answer is `![short caption](image_<n>)`, n the input image's
  number (read loosely: `Image-3`, `image_3.png`, a title); anything else (`image_99`, a real url)
  points to no image, and an image placed a second time is dropped as the public code drops it:
  both counted as unresolved, not judged.
- Metric arithmetic (§6, App. D): 0-10 judge scores clamped and normalised to 0-1; RAGAS context
  precision and faithfulness; image recall as the Figure 22 judge sees it and as the public code
  counts it; the strict and reference-compatible aggregations (see `aggregate`), the lines the
  public evaluate.py prints beside the overall (`averages`) and the per-topic overall of Figure 3
  (`by_topic`).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.parquet as pq

from stages.core.errors import StageError
from stages.core.images import file_of_hash, is_named_file, is_sha256
from stages.core.release import manifest_folder
from stages.core.schema_check import read_json

# a markdown image on one line: its caption may hold one level of brackets, its link anything but ")"
PLACEHOLDER = re.compile(r"!\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\(([^)\n]*)\)")
# our pseudo url image_<n>, read as loosely as a model writes it: any case, "_", "-" or " ", a file
# extension, angle brackets, a markdown title ("image_3.png", "<Image-3>", 'image_3 "a chart"')
PSEUDO_URL = re.compile(r"""^\s*<?image[_\- ]?(\d+)(?:\.[a-z]{3,4})?>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*$""", re.I)
TEXT_METRICS = ("fluency", "relevance", "context_precision", "faithfulness")
IMAGE_METRICS = ("image_coherence", "image_helpfulness", "image_reference")
METRICS = (*TEXT_METRICS, *IMAGE_METRICS, "image_recall")
RAGAS_METRICS = ("context_precision", "faithfulness")


# ---------------------------------------------------------------- release


def release_folder(path: str) -> Path:
    """The release folder from a manifest JSON ({"path": folder}) or the folder itself; M2RAG's
    published `dev_set.jsonl` (any `.jsonl` file) is returned as is."""
    given = Path(path)
    if given.suffix == ".jsonl" and given.is_file():
        return given
    if given.suffix == ".json" and given.is_file():
        given = manifest_folder(given)
    if not (given / "parquet").is_dir():
        raise StageError(f"release: {given} has no parquet/ folder (given {path})")
    for table in ("queries", "pages", "elements", "images"):
        if not (given / "parquet" / f"{table}.parquet").is_file():
            raise StageError(f"release: {given}/parquet/{table}.parquet is missing (an M2RAG release built with pages and elements has it)")
    return given


def read_release(folder: Path) -> dict[str, list]:
    """The tables evaluation needs, as rows; absent aux_images / caption columns read as empty / alt
    text. Also `files` (sha256 -> image file of the published layout, none for our releases) and
    `bad_records` ((id, why) of published records that cannot be read, each a reject)."""
    if folder.is_file():
        return read_dev_set(folder)
    tables = {name: pq.read_table(folder / "parquet" / f"{name}.parquet").to_pylist() for name in ("queries", "pages", "elements", "images")}
    tables["files"], tables["bad_records"] = {}, []
    for image in tables["images"]:
        if not image.get("caption"):
            image["caption"], image["caption_mode"] = image.get("alt") or "", "alt"
    aux = folder / "parquet" / "aux_images.parquet"
    tables["aux_images"] = pq.read_table(aux).to_pylist() if aux.is_file() else []
    return tables


# M2RAG-Bench (the seed's published benchmark, scripts/export_dev_set.py of its code) is one JSON
# record per query: {query_id, content, level, webpages: [{webpage_id, url, title, cleaned_webpage_splits:
# [{split_id, text, score}], images: [{split_id, image_id, image_url, cached_image_url, valid, final_score,
# detailed_image_caption}]}], aux_images: [{image_id, image_url, cached_image_url, valid, final_score,
# detailed_image_caption}]}; the images are files at the cached url's path under an images root
# (`<root>/ELI5/dev_set/query-<q>/webpage-<w>/<image_id>.<ext>`), the root being `images/` beside the
# JSONL or beside its folder (the seed's download script puts them in data/images, the JSONL in data/dev_set).
def _published_file(jsonl: Path, cached_url) -> Path | None:
    if not isinstance(cached_url, str) or not cached_url:
        return None
    try:
        relative = Path(urlsplit(cached_url).path.lstrip("/"))
    except ValueError:
        return None
    if ".." in relative.parts:
        return None
    for root in (jsonl.parent / "images", jsonl.parent.parent / "images", jsonl.parent):
        if is_named_file(root / relative):
            return root / relative
    return None


def _published_image(jsonl: Path, image: dict, files: dict[str, Path]) -> dict:
    """url, sha256 (of the local file, "" when absent: shown by its caption), score (None unless
    the record marks the image valid: the seed's code drops the others) and caption."""
    path = _published_file(jsonl, image.get("cached_image_url"))
    sha = hashlib.sha256(path.read_bytes()).hexdigest() if path else ""
    if path:
        files[sha] = path
    score = _score(image.get("final_score"))
    caption = image.get("detailed_image_caption")
    return {"url": str(image.get("image_url") or ""), "sha256": sha, "score": score if image.get("valid") is True else None,
            "caption": caption if isinstance(caption, str) else "", "caption_mode": "published", "alt": ""}


def _score(value) -> float | None:
    """A published score (0-10) as a float; None when it is not a finite number (not selected)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and -1e300 < value < 1e300:  # NaN, infinities, 10**400: none
        return float(value)
    return None


def _check(value, kind, what: str):
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ValueError(f"{what} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def read_dev_set(path: Path) -> dict[str, list]:
    """M2RAG-Bench's dev_set.jsonl as the tables `read_release` gives: queries (id m2rag:<query_id>,
    question, level), pages in search order (rank 1..), text pieces by split_id with their scores,
    each page image after its piece, auxiliary images; a record that is not valid JSON or lacks a
    field of its type is a bad record, never a crash."""
    tables: dict[str, list] = {"queries": [], "pages": [], "elements": [], "images": [], "aux_images": [], "files": {}, "bad_records": []}
    seen: set[str] = set()
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = _check(read_json(line), dict, "a record")
            raw_id = record.get("query_id")
            qid = f"m2rag:{_check(raw_id, (str, int), 'query_id')}"
            if qid in seen:
                raise ValueError(f"query_id {raw_id!r} is on an earlier line (the first is kept)")
            question = _check(record.get("content"), str, "content").strip()
            rows = {"pages": [], "elements": [], "images": [], "aux_images": []}
            for rank, page in enumerate(_check(record.get("webpages"), list, "webpages"), 1):
                _check(page, dict, "a webpage")
                pid = f"{qid}/w{_check(page.get('webpage_id'), (str, int), 'webpage_id')}"
                rows["pages"].append({"id": pid, "query_id": qid, "rank": rank, "url": str(page.get("url") or ""),
                                      "title": str(page.get("title") or "")})
                for piece in _check(page.get("cleaned_webpage_splits") or [], list, "cleaned_webpage_splits"):
                    split = _check(_check(piece, dict, "a split").get("split_id"), int, "split_id")
                    score = piece.get("score")
                    rows["elements"].append({"element_id": f"{pid}#t{split}", "page_id": pid, "query_id": qid, "order": split * 1000,
                                             "kind": "text", "text": _check(piece.get("text"), str, "a split's text"),
                                             "score": _score(score)})
                for j, image in enumerate(_check(page.get("images") or [], list, "images")):
                    split = _check(image, dict, "an image").get("split_id")
                    order = (split * 1000 if isinstance(split, int) and not isinstance(split, bool) else 10**9) + 1 + j
                    row = {"element_id": f"{pid}#i{j}", "page_id": pid, "query_id": qid, "order": order,
                           **_published_image(path, image, tables["files"])}
                    rows["images"].append(row)
                    rows["elements"].append({"element_id": row["element_id"], "page_id": pid, "query_id": qid, "order": order,
                                             "kind": "image", "text": row["caption"], "score": row["score"]})
            for image in _check(record.get("aux_images") or [], list, "aux_images"):
                rows["aux_images"].append({"query_id": qid, **_published_image(path, _check(image, dict, "an aux image"), tables["files"])})
        except ValueError as err:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors too
            tables["bad_records"].append((f"{path.name}:{n}", str(err)))
            continue
        seen.add(qid)
        tables["queries"].append({"id": qid, "question": question, "level": record.get("level")})
        for name, found in rows.items():
            tables[name].extend(found)
    return tables


def image_file(folder: Path, sha256: str | None) -> Path | None:
    """A released image file, `images/<sha256>.<ext>`, or None (also for a value that is not a sha256)."""
    return file_of_hash(folder / "images", sha256)


# ---------------------------------------------------------------- input selection (App. E)


@dataclass(frozen=True)
class Selection:
    text_per_page: int = 20
    min_text_score: float = 3
    min_image_score: float = 3
    max_page_images: int = 5
    max_aux_images: int = 5
    max_images: int = 10


def _stored(image: dict) -> str:
    """The image's sha256 as the release gives it, "" when it has none or not one in hex (a
    release folder is read without a contract: such a value names no file)."""
    return image["sha256"] if is_sha256(image.get("sha256")) else ""


def _best(rows: list[dict], k: int, minimum: float) -> list[dict]:
    kept = [r for r in rows if r.get("score") is not None and r["score"] >= minimum]
    return sorted(kept, key=lambda r: (-r["score"], r.get("order", 0)))[:k]


def group_inputs(tables: dict[str, list[dict]]) -> dict[str, dict[str, list]]:
    """The release's pages and auxiliary images by query, its elements and page images (with
    their place in the table) by page: built once, for select_inputs, which scanned every table
    for each query."""
    grouped: dict[str, dict[str, list]] = {"pages": {}, "aux_images": {}, "elements": {}, "images": {}}
    for name, key in (("pages", "query_id"), ("aux_images", "query_id"), ("elements", "page_id")):
        for row in tables[name]:
            grouped[name].setdefault(row[key], []).append(row)
    for position, row in enumerate(tables["images"]):
        grouped["images"].setdefault(row["page_id"], []).append((position, row))
    return grouped


def select_inputs(query_id: str, grouped: dict[str, dict[str, list]], sel: Selection) -> tuple[list[dict], list[dict]]:
    """(pages, images) of one query, from the release grouped by group_inputs. pages: [{rank,
    title, url, blocks}] in rank order, blocks the kept text pieces and images in page order
    ({"text": ...} or {"image": n}); images: the chosen input images numbered 1.. (page images in
    page order first, then auxiliary ones).

    Images as App. E and the public code (filter_images_and_reorganize_webpages) choose them: each
    page's best `max_page_images` and the best `max_aux_images` auxiliary images scored at least
    `min_image_score`, then the best `max_images` of those by score, ties to the earlier (pages in
    rank order, each in page order, then the auxiliary images)."""
    pages = sorted(grouped["pages"].get(query_id, []), key=lambda p: p["rank"])
    rank = {p["id"]: p["rank"] for p in pages}
    candidates = []  # (source, image)
    for page_id in rank:  # a page's images in table order, as ties among them fall
        placed = sorted(grouped["images"].get(page_id, []), key=lambda placed: placed[0])
        best = _best([dict(i, rank=rank[page_id]) for _, i in placed], sel.max_page_images, sel.min_image_score)
        candidates += [("page", i) for i in sorted(best, key=lambda i: i["order"])]
    aux = [dict(a, order=i) for i, a in enumerate(grouped["aux_images"].get(query_id, []))]
    candidates += [("aux", a) for a in sorted(_best(aux, sel.max_aux_images, sel.min_image_score), key=lambda a: a["order"])]
    kept = sorted(range(len(candidates)), key=lambda k: -candidates[k][1]["score"])[: sel.max_images]  # stable: ties to the earlier
    chosen = [candidates[k] for k in sorted(kept)]
    chosen_page = [image for source, image in chosen if source == "page"]
    chosen_aux = [image for source, image in chosen if source == "aux"]
    images, number = [], {}
    for img in chosen_page:
        number[img["element_id"]] = len(images) + 1
        images.append({"n": len(images) + 1, "source": "page", "page_rank": img["rank"], "url": img["url"], "sha256": _stored(img),
                       "caption": img.get("caption") or "", "caption_mode": img.get("caption_mode") or "alt", "score": float(img["score"])})
    for img in chosen_aux:
        images.append({"n": len(images) + 1, "source": "aux", "page_rank": None, "url": img["url"], "sha256": _stored(img),
                       "caption": img.get("caption") or "", "caption_mode": img.get("caption_mode") or "", "score": float(img["score"])})
    out = []
    for page in pages:
        mine = grouped["elements"].get(page["id"], [])
        texts = {e["element_id"] for e in _best([e for e in mine if e["kind"] == "text"], sel.text_per_page, sel.min_text_score)}
        blocks = []
        for e in sorted(mine, key=lambda e: e["order"]):
            if e["element_id"] in texts:
                blocks.append({"text": e["text"], "image": None})
            elif e["element_id"] in number:
                blocks.append({"text": None, "image": number[e["element_id"]]})
        if blocks:
            out.append({"rank": page["rank"], "title": page.get("title") or "", "url": page.get("url") or "", "blocks": blocks})
    return out, images


# ---------------------------------------------------------------- placeholders


def placeholder(n: int, caption: str) -> str:
    short = " ".join((caption or f"image {n}").split())[:100].replace("]", ")")
    return f"![{short}](image_{n})"


def resolve_placeholders(text: str, n_inputs: int) -> tuple[list[dict], list[str]]:
    """(output images, unresolved placeholders). Each output image: {n, start, end} of one
    placeholder naming an input image 1..n_inputs, in answer order. An image placed again is
    unresolved, as the public handle_output_images drops a repeat: each input image is judged once."""
    found, unresolved, placed = [], [], set()
    for match in PLACEHOLDER.finditer(text or ""):
        pseudo = PSEUDO_URL.match(match.group(2))
        n = int(pseudo.group(1)) if pseudo else 0
        if 1 <= n <= n_inputs and n not in placed:
            found.append({"n": n, "start": match.start(), "end": match.end()})
            placed.add(n)
        else:
            unresolved.append(match.group(0))
    return found, unresolved


def strip_placeholders(text: str) -> str:
    """The answer's text with every image placeholder removed (fluency, relevance, RAGAS)."""
    return re.sub(r"\n{3,}", "\n\n", PLACEHOLDER.sub("", text or "")).strip()


def image_contexts(text: str, found: list[dict], chars: int) -> list[tuple[str, str]]:
    """(text above, text below) of each output image, other placeholders removed, at most
    `chars` characters each side (the nearest ones)."""
    out = []
    for image in found:
        above = strip_placeholders(text[: image["start"]])
        below = strip_placeholders(text[image["end"]:])
        out.append((above[-chars:] if chars else above, below[:chars] if chars else below))
    return out


def document_with_captions(text: str, found: list[dict], captions: dict[int, str]) -> str:
    """Figure 22's document: each of the answer's images replaced by a line `<image>: caption`."""
    parts, last = [], 0
    for image in found:
        parts += [text[last: image["start"]], f"\n<image>: {captions.get(image['n']) or '(no caption)'}\n"]
        last = image["end"]
    parts.append(text[last:])
    return PLACEHOLDER.sub("", "".join(parts)).strip()


# ---------------------------------------------------------------- metric arithmetic


def normalise(score: float | None, scale: int) -> float | None:
    """A judge score on 0..scale as 0-1, clamped to the scale first as the public code does
    (`max(lower, min(upper, score)) / upper`: "12" on 0-10 is 1.0). Fig. 17-21: scale 10; Fig. 22
    and RAGAS verdicts: 1."""
    return None if score is None else max(0, min(scale, score)) / scale


def context_precision(verdicts: list[int]) -> float:
    """RAGAS context precision over the contexts in order (ragas 0.2.9, which M2RAG pins:
    _calculate_average_precision): sum_k precision@k * v_k / (number of relevant contexts + 1e-10),
    so one relevant context alone is 0.9999999999, none relevant 0, no context 0 (its empty sum)."""
    return sum(sum(verdicts[: k + 1]) / (k + 1) * v for k, v in enumerate(verdicts)) / (sum(verdicts) + 1e-10)


def faithfulness(verdicts: list[int]) -> float | None:
    """RAGAS faithfulness: statements supported by the contexts / statements; None (RAGAS: NaN) without statements."""
    return sum(verdicts) / len(verdicts) if verdicts else None


def image_recall_judge(used: set[int], unused_verdicts: dict[int, int]) -> float | None:
    """Figure 22 as a recall: the images the answer used, over those plus the unused input images
    the judge says should have been inserted; None when the answer used none and none was wanted
    (nothing to recall)."""
    wanted = sum(1 for n, v in unused_verdicts.items() if v and n not in used)
    return None if not used and not wanted else len(used) / (len(used) + wanted)


def image_recall_count(used: set[int], input_scores: dict[int, float], threshold: float = 8) -> float:
    """The public code's recall over distinct input images: of those scored >= threshold, the share
    the answer used; 1.0 when no input image reaches the threshold (its `[1.0]` for an empty list)."""
    good = {n for n, s in input_scores.items() if s is not None and s >= threshold}
    return len(good & used) / len(good) if good else 1.0


def image_recall_public(used_urls: set[str], inputs: list[tuple[str, float | None]], threshold: float = 8) -> float:
    """evaluate.py's recall as it computes it, by url: the urls of the input images scored >=
    threshold as a list (an image on two pages, or a page's and an auxiliary one, counts twice),
    the set of those the answer used over the list's length; 1.0 when the list is empty. It equals
    `image_recall_count` unless a url repeats."""
    positive = [url for url, score in inputs if score is not None and score >= threshold]
    return len(set(positive) & used_urls) / len(positive) if positive else 1.0


def reference_score(row: dict, scale: int) -> float | None:
    """A 0..scale judgement as the public evaluator reads the judge's reply
    (few_shot_evaluator.py, `extract_score_from_str`): the last run of digits in the text, 0 when
    it holds none, clamped to the scale and normalised (`normalise`). So it is read from whatever
    the judge answered: a checked JSON answer (whose `score` field comes last, so the same
    number), one our schema refused ('{"score": 11}' is 1.0, '{"score": "high"}' is 0), or text
    that is not JSON ("Good. 8/10" is 1.0, "fluent" is 0). A call without a judge's reply (a
    backend error, whose body may hold any number; an answer over llm.max_answer_chars, kept only
    in part) yields none: the public code stops there."""
    error = row.get("error") or ""
    if row["status"] != "judged" and not error.startswith(("non_json:", "schema:")):
        return None
    digits = _DIGITS.findall(row["raw"] or "")
    if not digits:
        return 0.0
    # int() refuses runs over 4,300 digits (where the public code stops): such a number is over the scale
    return normalise(int(digits[-1]) if len(digits[-1]) <= 4300 else scale, scale)


_DIGITS = re.compile(r"\d+")  # as the public code: any Unicode decimal digit, as int() reads it


def mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return sum(present) / len(present) if present else None


def response_scores(response: dict, judgements: list[dict]) -> dict:
    """Per-response metric values, strict and reference-compatible, from its judgement rows.

    Both modes: a failed judge call never yields a score (the metric, or that image's value, is
    missing); RAGAS context precision without contexts is 0 (RAGAS's empty sum).
    strict: only answered calls count; faithfulness without statements is missing (RAGAS NaN);
    image metrics one value per output image; recall the Figure 22 judge's.
    reference (the public code's computation): 0-10 scores by `reference_score` (clamped);
    faithfulness without statements 1.0 (the public code clamps RAGAS's NaN: min(1, NaN) = 1);
    image recall by the input images scored >= 8, counted by url as evaluate.py does, 1.0 when there is none.
    """
    rows: dict[str, list[dict]] = {}
    for j in judgements:
        rows.setdefault(j["metric"], []).append(j)
    used = {i["n"] for i in response["output_images"]}
    strict: dict = {}
    ref: dict = {}
    for metric in ("fluency", "relevance"):
        got = rows.get(metric, [])
        strict[metric] = normalise(got[0]["score"], 10) if got and got[0]["status"] == "judged" else None
        ref[metric] = reference_score(got[0], 10) if got else None
    for metric, formula in (("context_precision", context_precision), ("faithfulness", faithfulness)):
        got = sorted(rows.get(metric, []), key=lambda j: j["position"])
        if any(j["status"] == "failed" for j in got):
            strict[metric] = ref[metric] = None
        else:
            value = formula([int(j["score"]) for j in got])
            strict[metric], ref[metric] = value, 1.0 if value is None else value
    for metric in IMAGE_METRICS:
        got = sorted(rows.get(metric, []), key=lambda j: j["position"])
        strict[metric] = [normalise(j["score"], 10) if j["status"] == "judged" else None for j in got]
        ref[metric] = [reference_score(j, 10) for j in got]
    recall_rows = rows.get("image_recall", [])
    if any(j["status"] == "failed" for j in recall_rows):
        strict["image_recall"] = None
    else:
        strict["image_recall"] = image_recall_judge(used, {j["position"]: int(j["score"]) for j in recall_rows})
    strict["image_recall_count"] = image_recall_count(used, {i["n"]: i["score"] for i in response["inputs"]})
    used_urls = {i["url"] for i in response["inputs"] if i["n"] in used}
    ref["image_recall"] = ref["image_recall_count"] = image_recall_public(used_urls, [(i["url"], i["score"]) for i in response["inputs"]])
    return {"strict": strict, "reference": ref}


def aggregate(per_response: list[dict], mode: str) -> dict:
    """System-level metrics of one (model, approach) from its responses' `response_scores`.

    Text metrics and recall: mean over queries where present. Image metrics: mean over all output
    images of all queries. Overall, strict: the mean of the eight that are defined; a system that
    output no image has no coherence / helpfulness / reference, and its overall is the mean of the
    other five (`overall_over` says how many). Overall, reference: the mean of the eight, None
    (the public code's NaN) when any is undefined, e.g. with no output image.
    """
    out: dict = {}
    for metric in (*TEXT_METRICS, "image_recall", "image_recall_count"):
        values = [r[mode][metric] for r in per_response]
        out[metric] = mean(values)
        out[f"{metric}_missing"] = sum(1 for v in values if v is None)
    for metric in IMAGE_METRICS:
        values = [v for r in per_response for v in r[mode][metric]]
        out[metric] = mean(values)
        out[f"{metric}_missing"] = sum(1 for v in values if v is None)
    out["output_images"] = sum(len(r[mode]["image_coherence"]) for r in per_response)
    eight = [out[m] for m in METRICS]
    if mode == "strict":
        present = [v for v in eight if v is not None]
        out["overall"] = sum(present) / len(present) if present else None
        out["overall_over"] = len(present)
    else:
        out["overall"] = None if any(v is None for v in eight) else sum(eight) / len(eight)
        out["overall_over"] = 8 if out["overall"] is not None else 0
    out.update(averages(out, mode))
    return out


def averages(agg: dict, mode: str) -> dict:
    """The two lines the public evaluate.py prints after the overall: "Text Avg." (the mean of the
    four text metrics) and "Multi-modal P. Avg." (the mean of image coherence, helpfulness and
    reference). reference: undefined when any of its metrics is (numpy's NaN); strict: the mean of
    those defined."""
    out = {}
    for name, metrics in (("text_average", TEXT_METRICS), ("image_precision_average", IMAGE_METRICS)):
        values = [agg[m] for m in metrics]
        present = [v for v in values if v is not None]
        out[name] = None if not present or (mode == "reference" and len(present) < len(values)) else sum(present) / len(present)
    return out


def by_topic(per_response: dict[tuple[str, str], list[tuple[str, dict]]], mode: str) -> dict[str, dict]:
    """Figure 3: per topic, the overall score of each system (model, approach) over its responses to
    that topic's queries, and their average over the systems that have one ("average", "systems").
    `per_response`: system -> [(topic, response_scores)]."""
    topics: dict[str, dict] = {}
    for system, rows in sorted(per_response.items()):
        for topic in sorted({t for t, _ in rows}):
            overall = aggregate([r for t, r in rows if t == topic], mode)["overall"]
            topics.setdefault(topic, {"systems": {}})["systems"][system] = overall
    for entry in topics.values():
        present = [v for v in entry["systems"].values() if v is not None]
        entry["average"] = sum(present) / len(present) if present else None
    return topics

"""MAVIS evaluation helpers shared by the stages of stages/eval_mavis/ (mavis.txt §3.1, §4, §5.6, App. B).

- The release: `release_folder` (a manifest, a folder, or its benchmark.duckdb) and `load_release`
  (its parquet/ tables as rows). A question's images are `images` rows with role `question` of the
  instance's post: joined on `images.post_id` when the release has that column, else on the url
  (the instance's `image_urls`).
- Answers: `remove_thinking` (Table 17's <thinking> block), `split_sentences` (blingfire, a
  sentence made only of citation markers joins the one before), `parse_citations` ("[1]", "[1][2]",
  "[1, 2]", "[1; 2]"; "[12]" is document 12, never 1 and 2; a number outside 1..n names no
  document and is kept apart as `unknown`; duplicates count once), `plain_text` (citations and
  markdown removed, for MAUVE).
- Scores (§4): judge labels fully / partially / not = 1 / 0.5 / 0 (`label_score`), and
  `response_scores` in two aggregations, strict and reference (its docstring says what each counts).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq

from .errors import StageError
from .sentences import answer_sentences
from .stage import Reject

RELEASE_TABLES = ("instances", "facts", "documents", "images")  # fact_documents (gold support) is not read
SETTINGS = ("text", "image", "multi")  # Text-RAG, Image-RAG, Multi-RAG (§5.2)
METHODS = ("vanilla", "cot", "vanilla_ke", "cot_ke")  # Tables 16, 17; +KE = Table 18 first
SCORINGS = ("strict", "reference")

_BRACKET = re.compile(r"\[\s*(\d+(?:\s*[,;]\s*\d+)*)\s*\]")
_MARKERS_ONLY = re.compile(r"^(?:\s*\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\])+[\s.!?*]*$")
_THINKING = re.compile(r"<thinking>.*?</thinking>", re.S | re.I)
_OPEN_THINKING = re.compile(r"<thinking>.*", re.S | re.I)


# ---- the release -------------------------------------------------------------------------------
def release_folder(path: str) -> Path:
    """The release folder from its manifest JSON ({"path": folder}), the folder, or its benchmark.duckdb."""
    given = Path(path)
    if given.is_file() and given.suffix == ".json":
        manifest = json.loads(given.read_text())
        if "path" not in manifest:
            raise StageError(f"release manifest {given} has no 'path'")
        given = Path(manifest["path"])
    elif given.is_file():
        given = given.parent
    if not (given / "parquet").is_dir():
        raise StageError(f"release: {given} has no parquet/ folder (given {path})")
    return given


def load_release(folder: Path) -> dict[str, list[dict]]:
    """The release's tables as rows; a table the evaluation needs and the release lacks stops the stage."""
    tables = {}
    for name in RELEASE_TABLES:
        path = folder / "parquet" / f"{name}.parquet"
        if not path.exists():
            raise StageError(f"release {folder}: no {name} table (parquet/{name}.parquet); a MAVIS release with "
                             "documents is needed for the evaluation")
        tables[name] = pq.read_table(path).to_pylist()
    return tables


def question_images(instance: dict, images: list[dict]) -> list[dict]:
    """The instance's question images: by images.post_id when the release has it, else by url."""
    question = [row for row in images if row.get("role") == "question"]
    if question and "post_id" in question[0]:
        return [row for row in question if row["post_id"] == instance["post_id"]]
    urls = list(instance.get("image_urls") or [])
    by_url = {row["url"]: row for row in question}
    return [by_url[url] for url in urls if url in by_url]


# ---- answers -----------------------------------------------------------------------------------
def remove_thinking(text: str) -> str:
    """The answer without Table 17's reasoning block; an unclosed block runs to the end."""
    return _OPEN_THINKING.sub("", _THINKING.sub("", text or "")).strip()


def parse_citations(sentence: str, n_documents: int) -> tuple[list[int], list[int], list[int]]:
    """(cited documents, citations naming no document, every number as written) of one sentence."""
    written = [int(n) for match in _BRACKET.finditer(sentence) for n in re.split(r"[,;]", match.group(1))]
    distinct = list(dict.fromkeys(written))
    return [n for n in distinct if 1 <= n <= n_documents], [n for n in distinct if not 1 <= n <= n_documents], written


def strip_citations(text: str) -> str:
    return re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s{2,}", " ", _BRACKET.sub("", text))).strip()


def split_sentences(text: str) -> list[str]:
    return answer_sentences(text, lambda sentence: bool(_MARKERS_ONLY.match(sentence)))


def plain_text(text: str) -> str:
    """Citations and markdown removed (MAUVE compares prose): links keep their text, emphasis,
    headings, list markers and code ticks go."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text or "")
    text = _BRACKET.sub("", text)
    text = re.sub(r"^\s{0,3}(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s?)", "", text, flags=re.M)
    text = re.sub(r"(\*\*|__|\*|`)", "", text)
    return re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s+", " ", text)).strip()


# ---- scores ------------------------------------------------------------------------------------
def label_score(label: str) -> float:
    """fully ... = 1, partially ... = 0.5, not ... = 0 (§4)."""
    return {"fully": 1.0, "partially": 0.5, "not": 0.0}[label.split()[0].lower()]


def harmonic(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def _mean(values: list[float | None], failed_as_zero: bool) -> float | None:
    if failed_as_zero:
        values = [0.0 if v is None else v for v in values]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def response_scores(sentences: list[dict], n_facts: int, facts: list[float | None], relevance: dict[int, float | None],
                    support: dict[int, float | None], support_doc: dict[tuple[int, int], float | None], scoring: str) -> dict:
    """One answer's completeness, relevance, recall, precision and the two F1s (0-1).

    `sentences`: {index, cited (documents that exist), unknown (citations naming none)}; judge
    scores per fact, per sentence (relevance; support of all cited documents together) and per
    (sentence, cited document); None = the judge call failed.

    strict (the paper's formulas, our choices where it is silent):
    - completeness = mean over the gold facts; an instance without facts has none (None);
    - relevance, recall and precision are means over EVERY sentence (the paper's 1/n); a sentence
      without citations has recall 0 and precision 0 (nothing supports it); a citation naming no
      document is in C_i with support 0 (it lowers precision), and a sentence citing only such
      numbers has recall 0; duplicates count once;
    - a failed judge call makes that metric missing for the answer (None), never 0;
    - an empty answer (no sentence) scores 0 everywhere, completeness included.
    reference (the aggregation of MAVIS's public code, its parsing quirks not copied): recall and
    precision are means over the cited sentences only (an answer with none scores 0), and a failed
    judge call counts 0.
    """
    reference = scoring == "reference"
    if not sentences:
        zero = {"completeness": 0.0 if n_facts else None, "relevance": 0.0, "recall": 0.0, "precision": 0.0}
        return {**zero, "informativeness_f1": harmonic(zero["completeness"], 0.0), "groundedness_f1": 0.0}
    completeness = _mean(facts, reference) if n_facts else None
    rel = _mean([relevance.get(s["index"]) for s in sentences], reference)
    scored = [s for s in sentences if s["cited"] or s["unknown"]] if reference else sentences
    recalls, precisions = [], []
    for s in scored:
        i, cited = s["index"], s["cited"]
        recalls.append(support.get(i) if cited else 0.0)
        total = len(cited) + len(s["unknown"])
        if not total:
            precisions.append(0.0)
            continue
        docs = [support_doc.get((i, d)) for d in cited]
        if any(v is None for v in docs) and not reference:
            precisions.append(None)
            continue
        precisions.append(sum(v or 0.0 for v in docs) / total)
    recall = _mean(recalls, reference) if scored else 0.0
    precision = _mean(precisions, reference) if scored else 0.0
    return {"completeness": completeness, "relevance": rel, "recall": recall, "precision": precision,
            "informativeness_f1": harmonic(completeness, rel), "groundedness_f1": harmonic(recall, precision)}


def model_image(store, folder: Path, row: dict, max_side: int) -> str:
    """A release image, its longer side scaled down to `max_side` pixels (App. C.1), put into the
    model client's image store; its sha256 there."""
    import io

    from PIL import Image

    path = folder / row["path"]
    if not path.is_file():
        raise Reject("missing_image", f"release image {row['path']} is not in {folder}")
    image = Image.open(path)
    if max(image.size) <= max_side:
        return store.put(path.read_bytes(), path.suffix or ".jpg")
    image.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=95)
    return store.put(buffer.getvalue(), ".jpg")

"""MAVIS evaluation helpers shared by the stages of stages/eval_mavis/ (mavis.txt §3.1, §4, §5.6, App. B).

- The release: `release_folder` (a manifest, a folder, or its benchmark.duckdb) and `load_release`
  (its parquet/ tables as rows). A question's images are `images` rows with role `question` of the
  instance's post: joined on `images.post_id` when the release has that column, else on the url
  (the instance's `image_urls`). `positives`: an instance's gold documents, those entailed by one
  of its facts in `fact_documents`.
- Answers (strict): `remove_thinking` (Table 17's <thinking> block, for every method),
  `split_sentences` (blingfire, a sentence made only of citation markers joins the one before),
  `parse_citations` ("[1]", "[1][2]", "[1, 2]", "[1; 2]"; "[12]" is document 12, never 1 and 2; a
  number outside 1..n names no document and is kept apart as `unknown`; duplicates count once),
  `plain_text` (citations and markdown removed, for MAUVE).
- Answers as MAVIS's public code reads them (reference): `reference_answer` (after the last
  "</thinking>" and the last "answer is:"; "Error" for a failed call), `reference_statements` (the
  sentence before each "[...]", in the three variants of its groundedness, relevance and aggregate
  scripts), `reference_citations` (its reading of "[...]"), `reference_used` (its count of used
  documents), `mauve_text` / `mauve_dropped` (its fluency.py inputs).
- Scores (§4): judge labels fully / partially / not = 1 / 0.5 / 0 (`label_score`); `response_scores`
  (strict, the paper's formulas) and `reference_scores` (the public code's computation); their
  docstrings say what each counts.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.core.errors import StageError
from stages.core.images import STORED_FORMATS, is_named_file
from stages.core.release import manifest_folder
from stages.core.sentences import answer_sentences, line_sentences
from stages.core.stage import Reject

RELEASE_TABLES = ("instances", "facts", "documents", "fact_documents", "images")
SETTINGS = ("text", "image", "multi")  # Text-RAG, Image-RAG, Multi-RAG (§5.2)
METHODS = ("vanilla", "cot", "vanilla_ke", "cot_ke")  # Tables 16, 17; +KE = Table 18 first
SCORINGS = ("strict", "reference")
GOLD_MIN_CHARS = 500  # the public groundedness.py and fluency.py keep instances whose gold answer is longer
FAILED_ANSWER = "Error"  # what the public code's model client returns for a failed call

_BRACKET = re.compile(r"\[\s*(\d+(?:\s*[,;]\s*\d+)*)\s*\]")
_MARKERS_ONLY = re.compile(r"^(?:\s*\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\])+[\s.!?*]*$")
_THINKING = re.compile(r"<thinking>.*?</thinking>", re.S | re.I)
_OPEN_THINKING = re.compile(r"<thinking>.*", re.S | re.I)


# ---- the release -------------------------------------------------------------------------------
def release_folder(path: str) -> Path:
    """The release folder from its manifest JSON ({"path": folder}), the folder, or its benchmark.duckdb."""
    given = Path(path)
    if given.is_file() and given.suffix == ".json":
        given = manifest_folder(given)
    elif given.is_file():
        given = given.parent
    if not (given / "parquet").is_dir():
        raise StageError(f"release: {given} has no parquet/ folder (given {path})")
    return given


def load_release(folder: Path) -> dict[str, list[dict]]:
    """The release's tables as rows, of `fact_documents` only the entailed pairs (what `positives`
    reads; the release holds tens of millions of pairs at real scale); a table the evaluation
    needs and the release lacks stops the stage."""
    tables = {}
    for name in RELEASE_TABLES:
        path = folder / "parquet" / f"{name}.parquet"
        if not path.exists():
            raise StageError(f"release {folder}: no {name} table (parquet/{name}.parquet); a MAVIS release with "
                             "documents is needed for the evaluation")
        if name == "fact_documents":
            missing = sorted({"fact_id", "doc_id", "entailed"} - set(pq.read_schema(path).names))
            if missing:
                raise StageError(f"release {folder}: parquet/{name}.parquet has no column(s) {missing}")
            pairs = pq.read_table(path, columns=["fact_id", "doc_id", "entailed"])
            tables[name] = pairs.filter(pc.equal(pairs["entailed"], True)).to_pylist()
        else:
            tables[name] = pq.read_table(path).to_pylist()
    return tables


def positives(release: dict[str, list[dict]]) -> dict[str, set[str]]:
    """Each instance's gold documents: those `fact_documents` marks entailed for one of its facts."""
    instance_of = {f["fact_id"]: f["instance_id"] for f in release["facts"]}
    out: dict[str, set[str]] = {}
    for row in release["fact_documents"]:
        if row.get("entailed") and row["fact_id"] in instance_of:
            out.setdefault(instance_of[row["fact_id"]], set()).add(row["doc_id"])
    return out


def question_images(images: list[dict]) -> Callable[[dict], list[dict]]:
    """A function giving an instance its question images: by images.post_id when the release has
    it, else by url. Indexed once: a release holds up to millions of image rows, and scanning
    them per instance (per setting and method) was 70 ms a call at a million."""
    question = [row for row in images if row.get("role") == "question"]
    if question and "post_id" in question[0]:
        by_post: dict[str, list[dict]] = {}
        for row in question:
            by_post.setdefault(row["post_id"], []).append(row)
        return lambda instance: by_post.get(instance["post_id"], [])
    by_url = {row["url"]: row for row in question}
    return lambda instance: [by_url[url] for url in instance.get("image_urls") or [] if url in by_url]


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


# ---- MAVIS's public code's reading of an answer (reference) ---------------------------------------
_REF_PAIR = re.compile(r"(.*?)\s*\[([^\]]+)\]")  # its extract_references: the text before each bracket, the bracket
_SUBSCRIPTS = str.maketrans({"₀": "0", "₁": "1", "₂": "2", "²": "2", "₃": "3", "₄": "4", "₅": "5", "₆": "6", "₇": "7", "₈": "8", "₉": "9"})


def reference_answer(raw: str | None, error: str | None) -> str:
    """The answer the public scripts score: its generation keeps what follows the last "</thinking>"
    and then the last "answer is:", for every method; a failed call is its client's "Error" (an empty
    answer stays empty)."""
    if error and not error.startswith("empty"):
        return FAILED_ANSWER
    return (raw or "").split("</thinking>")[-1].split("answer is:")[-1].strip()


def reference_statements(answer: str, variant: str) -> list[tuple[str, str]]:
    """(statement, brackets) pairs as the public code extracts them: for each "[...]" the last
    sentence of the text before it on its line (nltk's punkt there, blingfire here), then a statement
    shorter than 5 characters hands its brackets to the one before ("[1][2]" cites 1 and 2). The
    scripts differ in two edge rules: `grounding` (util.py, groundedness.py) keeps a bracket with no
    text before it as an empty statement and keeps a short first statement; `relevance`
    (relevance.py) skips the former and drops the latter; `aggregate` (aggregate.py, the used
    documents) skips the former and keeps the latter."""
    pairs = []
    for text, tag in _REF_PAIR.findall(answer or ""):
        sentences = [x for x in line_sentences(text.strip())]
        if sentences:
            pairs.append((sentences[-1], f"[{tag}]"))
        elif variant == "grounding":
            pairs.append(("", f"[{tag}]"))
    merged: list[tuple[str, str]] = []
    for sentence, refs in pairs:
        if len(sentence) < 5 and merged:
            merged[-1] = (merged[-1][0], f"{merged[-1][1]},{refs}")
        elif len(sentence) >= 5 or variant != "relevance":
            merged.append((sentence, refs))
    return merged


def reference_citations(refs: str, n_documents: int) -> tuple[list[int], list[int], list[int]]:
    """(documents cited, numbers dropped, numbers read) of one statement's brackets as groundedness.py
    reads them: the brackets' text split on commas, each piece a number when its stripped text is
    digits and it is not exactly "0"; number k is document k when k <= n (duplicates kept, each a
    citation), a number past n is dropped, and " 0" (a zero after a comma and space) is document
    n, Python's documents_id[-1]."""
    read = []
    for piece in refs.replace("[", "").replace("]", "").split(","):
        if piece.strip().isdigit() and piece != "0":
            try:
                read.append(int(piece))
            except ValueError:  # a digit int() cannot read ("²"): the public code would stop here
                continue
    cited = [k if k >= 1 else n_documents for k in read if k - 1 < n_documents and n_documents]
    return cited, [k for k in read if k - 1 >= n_documents or not n_documents], read


def reference_used(answer: str, n_documents: int) -> set[int]:
    """The documents an answer used as aggregate.py counts them (Table 4's "Utilized"): every single
    digit (subscripts read as digits) inside the `aggregate` statements' brackets, 1..n ("[12]" is
    documents 1 and 2)."""
    return {int(ch) for _, refs in reference_statements(answer, "aggregate") for ch in refs.translate(_SUBSCRIPTS)
            if ch.isdecimal() and 0 < int(ch) <= n_documents}  # "²" is a digit int() refuses: not a document


def mauve_text(question: str, text: str) -> str:
    """fluency.py's MAUVE input: the question, a space and the text, "[k]" markers removed, line breaks
    and runs of whitespace made one space, " ." made ".", "**" removed."""
    text = re.sub(r"\[\d+\]", "", f"{question} {text}").replace("\n", " ").replace("\r", " ")
    text = re.sub(r"\s+", " ", text).strip().replace(" .", ".").replace("**", "")
    return " ".join(text.split())


def mauve_dropped(text: str) -> bool:
    """fluency.py drops a model text that contains "Error", or "document" or "information" in any case."""
    return "Error" in text or "document" in text.lower() or "information" in text.lower()


# ---- scores ------------------------------------------------------------------------------------
def label_score(label: str) -> float:
    """fully ... = 1, partially ... = 0.5, not ... = 0 (§4)."""
    return {"fully": 1.0, "partially": 0.5, "not": 0.0}[label.split()[0].lower()]


def harmonic(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def _mean(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def response_scores(sentences: list[dict], n_facts: int, facts: list[float | None], relevance: dict[int, float | None],
                    support: dict[int, float | None], support_doc: dict[tuple[int, int], float | None]) -> dict:
    """One answer's strict completeness, relevance, recall, precision and the two F1s (0-1): the
    paper's formulas, our choices where it is silent.

    `sentences`: {index, cited (documents that exist), unknown (citations naming none)}; judge
    scores per fact, per sentence (relevance; support of all cited documents together) and per
    (sentence, cited document); None = the judge call failed.
    - completeness = mean over the gold facts; an instance without facts has none (None);
    - relevance, recall and precision are means over EVERY sentence (the paper's 1/n); a sentence
      without citations has recall 0 and precision 0 (nothing supports it); a citation naming no
      document is in C_i with support 0 (it lowers precision), and a sentence citing only such
      numbers has recall 0; duplicates count once;
    - a failed judge call makes that metric missing for the answer (None), never 0;
    - an empty answer (no sentence: nothing written, only thinking, or a failed generation) scores 0
      everywhere, completeness included.
    """
    if not sentences:
        zero = {"completeness": 0.0 if n_facts else None, "relevance": 0.0, "recall": 0.0, "precision": 0.0}
        return {**zero, "informativeness_f1": harmonic(zero["completeness"], 0.0), "groundedness_f1": 0.0}
    completeness = _mean(facts) if n_facts else None
    rel = _mean([relevance.get(s["index"]) for s in sentences])
    recalls, precisions = [], []
    for s in sentences:
        i, cited = s["index"], s["cited"]
        recalls.append(support.get(i) if cited else 0.0)
        total = len(cited) + len(s["unknown"])
        docs = [support_doc.get((i, d)) for d in cited]
        precisions.append(None if any(v is None for v in docs) else sum(docs) / total if total else 0.0)
    recall, precision = _mean(recalls), _mean(precisions)
    return {"completeness": completeness, "relevance": rel, "recall": recall, "precision": precision,
            "informativeness_f1": harmonic(completeness, rel), "groundedness_f1": harmonic(recall, precision)}


def reference_scores(answer: str, gold: str, facts: list[float | None], relevance: list[float | None],
                     grounding: list[dict], support: dict[int, float | None], support_doc: dict[tuple[int, int], float | None]) -> dict:
    """One answer's metrics as MAVIS's public scripts compute them (completeness.py, relevance.py,
    groundedness.py), a failed judge call counting 0 as their "Error" label does. None = the script
    leaves the answer out of that mean.

    `answer`: `reference_answer`; `facts`: completeness per gold fact; `relevance`: per `relevance`
    statement; `grounding`: the `grounding` statements with cited documents ({index, cited}, see
    `reference_citations`); `support`: all cited documents together per statement; `support_doc`:
    (statement, citation position) alone, for statements with more than one citation.
    - the scripts run in their README's order (groundedness, completeness, relevance, fluency), each
      rewriting the answers file the next reads: groundedness.py keeps only the instances whose
      gold answer is over 500 characters, so every metric of a shorter one is None;
    - completeness: mean over the facts; 0 for an instance without facts;
    - relevance: mean over the relevance statements (judged with the gold answer shown, the image
      not); 0 without statements; None for an answer containing "Error" (relevance.py drops it);
    - recall and precision: over the statements with at least one cited document, recall the
      support of all together, precision the mean over its citations of each alone (one citation:
      the same call); 0 and 0 when no statement cites a document.
    """
    if len(gold or "") <= GOLD_MIN_CHARS:
        return dict.fromkeys(("completeness", "relevance", "recall", "precision", "informativeness_f1", "groundedness_f1"))
    completeness = sum(v or 0.0 for v in facts) / len(facts) if facts else 0.0
    rel = None if FAILED_ANSWER in answer else sum(v or 0.0 for v in relevance) / len(relevance) if relevance else 0.0
    scored = [g for g in grounding if g["cited"]]
    recall = sum(support.get(g["index"]) or 0.0 for g in scored) / len(scored) if scored else 0.0
    per = [support.get(g["index"]) or 0.0 if len(g["cited"]) == 1 else
           sum(support_doc.get((g["index"], j)) or 0.0 for j in range(len(g["cited"]))) / len(g["cited"]) for g in scored]
    precision = sum(per) / len(per) if per else 0.0
    return {"completeness": completeness, "relevance": rel, "recall": recall, "precision": precision,
            "informativeness_f1": harmonic(completeness, rel), "groundedness_f1": harmonic(recall, precision)}


# The reason model_image rejects with.
MODEL_IMAGE_REJECTS = {"missing_image": "an image the release names is not in the release folder, or is not an image it keeps (JPEG, PNG, GIF, WEBP)"}


def model_image(store, folder: Path, row: dict, max_side: int) -> str:
    """A release image, its longer side scaled down to `max_side` pixels (App. C.1), put into the
    model client's image store; its sha256 there."""
    import io

    from PIL import Image

    path = folder / row["path"]
    if not is_named_file(path):
        raise Reject("missing_image", f"release image {row['path']} is not in {folder}")
    try:
        image = Image.open(path, formats=STORED_FORMATS)  # only the decoders a release's images need (stages/core/images.py)
        if max(image.size) <= max_side:
            return store.put(path.read_bytes(), path.suffix or ".jpg")
        image.thumbnail((max_side, max_side))
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="JPEG", quality=95)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:  # what Pillow raises on bytes it cannot read
        raise Reject("missing_image", f"release image {row['path']} is not an image the release keeps ({err})") from None
    return store.put(buffer.getvalue(), ".jpg")

"""Responses -> statements with citations, CiteEval's post-processing (citeeval.txt App. C.2; §2.1
statements; Table 9's "No answer is found").

For each response, in this order:
1. Thinking: everything up to the first `</thinking>` is dropped (the seed's generation prompt puts
   the thinking first); an unclosed `<thinking>` drops the rest of the response.
2. Sentences: each non-empty line is split offline with blingfire (the seed uses NLTK's
   tokenizer; blingfire is the project's offline splitter). Statements are sentences (§8).
3. Citations: `[k]` markers (the seed's regex `\\[(\\d+)\\]`) are taken out of the statement text.
   Markers that open a sentence belong to the statement before it; a sentence made only of
   markers is folded into the one before. Ids that name none of the response's passages are
   dropped (kept in `dropped`; for CiteEval's own files the ids are 1..N, the seed's "[1, 10]").
   A citation given twice to one statement counts once (first-seen order).
4. Fragments: a statement shorter than `min_statement_chars` characters (citations removed, e.g.
   "Yes." or "e.g." splits) is merged into the statement before it, with its citations.
5. Unanswerable: a response that is the single statement "No answer is found…" is kept as one
   uncited statement flagged `unanswerable`; context attribution gives it 3 (Response) by Table
   10's tie rule, so it is never rated.
6. Empty: a response with nothing left (no text after the thinking block, or no statement in it)
   is kept with no statements, flagged `empty`: strict leaves it out of the means (counted),
   the reference mode rates it as the public code does (citeeval_score).

For the reference-compatible mode (CiteEval's public post-processing, convert_to_citeeval_format.py)
two flags are kept beside, for responses we split ourselves (a CiteEval file's own sentences are
read as they are, as the public evaluator reads them):
- `thinking_unclosed`: a `<thinking>` without `</thinking>`; the public code then keeps the
  whole text, thinking included, as the response;
- `no_answer_reference`: the public "no answer" regex (`(no|none|not)`, then within 30
  characters `information`, `details`, `answer`, `mention(ed)`, `provided`, `source(s)`,
  `passage(s)` or `found`, case-insensitive) matches the text the public code keeps: it then
  rewrites the whole response to "No answer is found.".

Inputs (one of them):
- responses: `citeeval_responses`, the table every evaluation feeds CiteEval-Auto with (README
  "CiteEval-Auto"): response_id, model, source, query, passages [{id, title, text, mode}], response,
  mode. Text items are passages as they are; an image item is its caption or text stand-in
  (`mode` per passage and per row).
- citeeval_json: a file in CiteEval's JSON format (UTF-8, a byte-order mark allowed; a file that
  is not UTF-8 JSON fails in one line), a list of samples `{sample_idx, query, passages: [{id,
  title, text}], prediction, prediction_sentences_and_citations: [{id, sentence, citations}]}`
  (`model`, a string, optional). A sample with its sentences is imported as it is (only
  out-of-range and duplicate citations are removed); a sample with only `prediction` (or `pred`,
  the system-output format) goes through steps 1-5. A sample is `bad_record`, naming the field,
  when its sample_idx (or id) is not a string or an integer, its model or a passage title not a
  string, a passage id not a number (written "1" or 1; "1" and "01" in one sample name the same
  passage: rejected), a sentence not text or its citations not a list of passage numbers.
Outputs: responses (citeeval_prepared, one row per response), statements (citeeval_statements,
not counted), export (the prepared responses in CiteEval's JSON format: importing it again gives
the same statements).
Rejects: bad_record (no query or passages, or a malformed sample: the field named), duplicate_id (a response id
seen before).
Params: model (model name for a CiteEval file's samples), min_statement_chars, limit.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from stages.citeeval.citeeval import CITATION
from stages.core.ids import content_id
from stages.core.sentences import line_sentences
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.tables import atomic_write_bytes

VERSION = "3"  # 3: malformed CiteEval samples (ids, titles, models, citations of the wrong type) are bad_record
_LEADING = re.compile(r"^\W*?((?:\s*\[\d+\])+)")
_MARKER = re.compile(r"\s*\[\d+\]")
_NO_ANSWER = re.compile(r"^\W*no answer (?:is|was|could be) found\b", re.I)
_PUBLIC_NO_ANSWER = re.compile(
    r"(?i)\b(no|none|not)\b.{0,30}(\binformation\b|\bdetails\b|\banswer\b|\bmention(ed)?\b|\bprovided\b|\bsources?\b|\bpassages?\b|\bfound)\b")


def drop_thinking(text: str) -> tuple[str, bool]:
    """The response without its thinking block, and whether one was there."""
    close = text.find("</thinking>")
    if close >= 0:
        return text[close + len("</thinking>"):].strip(), True
    opening = text.find("<thinking>")
    if opening >= 0:
        return text[:opening].strip(), True
    return text.strip(), False


def public_text(text: str) -> str:
    """What the public post-processing keeps: the text after the first `</thinking>`, or all of
    it (an unclosed thinking block included)."""
    text = text.strip()
    close = text.find("</thinking>")
    return text[close + len("</thinking>"):].strip() if close >= 0 else text


def is_public_no_answer(text: str) -> bool:
    return bool(_PUBLIC_NO_ANSWER.search(text))


def _ids(text: str) -> list[int]:
    return [int(k) for k in CITATION.findall(text)]


def split_statements(text: str, min_chars: int) -> list[dict]:
    """Statements {sentence, citations (all, in order, duplicates kept)} of a response body."""
    statements: list[dict] = []
    for raw in line_sentences(text):
        lead = _LEADING.match(raw)
        if lead and statements:  # "[2] Next claim": [2] closes the statement before
            statements[-1]["citations"] += _ids(lead.group(1))
            raw = raw[lead.end():]
        clean = _MARKER.sub("", raw).strip()
        if statements and len(clean) < min_chars:  # a marker-only sentence or a short fragment
            last = statements[-1]
            last["sentence"] = f"{last['sentence']} {clean}".strip()
            last["citations"] += _ids(raw)
            continue
        if clean:
            statements.append({"sentence": clean, "citations": _ids(raw)})
    return statements


def keep_citations(citations: list[int], passage_ids: set[int]) -> tuple[list[int], list[int]]:
    """(kept: in range, each once, first-seen order; dropped: out of range, each once)."""
    kept = [c for c in dict.fromkeys(citations) if c in passage_ids]
    dropped = [c for c in dict.fromkeys(citations) if c not in passage_ids]
    return kept, dropped


def is_unanswerable(statements: list[dict]) -> bool:
    return len(statements) == 1 and bool(_NO_ANSWER.match(statements[0]["sentence"]))


def prepare(response: dict, min_chars: int, given: list[dict] | None = None) -> tuple[dict, list[dict]]:
    """The citeeval_prepared row and the statement rows of one response. `given`: statements
    already split (a CiteEval file's own), used as they are."""
    passage_ids = {p["id"] for p in response["passages"]}
    raw = response["response"] or ""
    if given is None:
        text, thinking = drop_thinking(raw)
        statements = split_statements(text, min_chars)
        unclosed, no_answer_reference = "</thinking>" not in raw and "<thinking>" in raw, is_public_no_answer(public_text(raw))
    else:
        text, thinking, statements, unclosed, no_answer_reference = raw, False, given, False, False
    unanswerable = is_unanswerable(statements)
    rows, all_dropped = [], []
    for index, statement in enumerate(statements, start=1):
        kept, dropped = keep_citations(statement["citations"], passage_ids)
        all_dropped += dropped
        rows.append({
            "id": content_id("stmt", response["response_id"], index),
            "response_id": response["response_id"], "model": response["model"], "sentence_id": index,
            "sentence": statement["sentence"], "citations": kept, "dropped": dropped, "unanswerable": unanswerable,
        })
    prepared = {
        "id": response["response_id"], "model": response["model"], "source": response["source"],
        "query": response["query"], "passages": response["passages"], "mode": response["mode"],
        "prediction": text, "thinking_dropped": thinking, "unanswerable": unanswerable,
        "n_statements": len(rows), "dropped_citations": all_dropped, "empty": not rows,
        "thinking_unclosed": unclosed, "no_answer_reference": no_answer_reference,
    }
    return prepared, rows


def _ident(value) -> str | None:
    """A sample's id as text: a string that is not blank, or an integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and value.strip() else None


def _citation(value) -> int | None:
    """A citation id: an integer >= 0, or its decimal digits as text (not 1.9, not true)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    return int(value) if isinstance(value, str) and value.isdecimal() else None


def sample_id(sample, n: int) -> str:
    """The response id of a CiteEval sample: its `sample_idx` (or `id`); `sample:<n>` (its place in
    the file) when it has no usable one, to name its reject."""
    if not isinstance(sample, dict):
        return f"sample:{n}"
    return _ident(sample.get("sample_idx", sample.get("id"))) or f"sample:{n}"


def from_citeeval_sample(sample: dict, model: str, ident: str) -> tuple[dict, list[dict] | None]:
    """A CiteEval JSON sample as a citeeval_responses row, and its own statements if it has them;
    Reject("bad_record") naming the field that is missing or of the wrong type."""
    if not isinstance(sample, dict):
        raise Reject("bad_record", f"a sample is a JSON object, got {type(sample).__name__}")
    if ident.startswith("sample:") and _ident(sample.get("sample_idx", sample.get("id"))) is None:
        raise Reject("bad_record", f"sample_idx {sample.get('sample_idx', sample.get('id'))!r:.80} is not an id (a string or an integer)")
    prediction = sample.get("prediction", sample.get("pred"))
    wrong = [k for k, ok in (("query", isinstance(sample.get("query"), str)), ("passages", isinstance(sample.get("passages"), list)),
                             ("prediction", isinstance(prediction, str)),
                             ("model", sample.get("model") is None or isinstance(sample["model"], str) and sample["model"].strip())) if not ok]
    if wrong:
        raise Reject("bad_record", f"sample without a valid {', '.join(wrong)}")
    passages, numbers = [], {}
    for n, passage in enumerate(sample["passages"], start=1):
        if not isinstance(passage, dict) or not isinstance(passage.get("text"), str):
            raise Reject("bad_record", f"passage {n} has no text")
        if not isinstance(passage.get("title") or "", str):
            raise Reject("bad_record", f"passage {n} has title {passage['title']!r:.80}, not a string")
        number = _citation(passage.get("id", n))
        if number is None:
            raise Reject("bad_record", f"passage {n} has id {passage['id']!r:.80}, not a number")
        if number in numbers:
            raise Reject("bad_record", f"passages {numbers[number]} and {n} both have id {number}")
        numbers[number] = n
        passages.append({"id": number, "title": passage.get("title") or "", "text": passage["text"], "mode": "text"})
    row = {"response_id": ident, "model": sample.get("model") or model,
           "source": "citeeval", "query": sample["query"], "passages": passages, "response": prediction, "mode": "text"}
    given = None
    if "prediction_sentences_and_citations" in sample:
        sentences = sample["prediction_sentences_and_citations"]
        if not isinstance(sentences, list):
            raise Reject("bad_record", f"prediction_sentences_and_citations is {sentences!r:.80}, not a list")
        given = []
        for n, sentence in enumerate(sentences, start=1):
            if not isinstance(sentence, dict):
                raise Reject("bad_record", f"sentence {n} is {str(sentence)[:80]}, not an object")
            text, citations = sentence.get("sentence"), sentence.get("citations")
            ids = [_citation(c) for c in citations] if isinstance(citations, list) else [None]
            if not isinstance(text, str):
                raise Reject("bad_record", f"sentence {n}: its sentence is {text!r:.80}, not text")
            if None in ids:
                raise Reject("bad_record", f"sentence {n}: its citations are {citations!r:.80}, not a list of passage numbers")
            given.append({"sentence": text, "citations": ids})
    return row, given


def to_citeeval_sample(prepared: dict, statements: list[dict]) -> dict:
    """One prepared response in CiteEval's JSON format (the public converter's keys)."""
    def concat(s):
        return s["sentence"] + (" " + "".join(f"[{c}]" for c in s["citations"]) if s["citations"] else "")

    return {
        "sample_idx": prepared["id"],
        "query": prepared["query"],
        "passages": [{"id": str(p["id"]), "title": p["title"], "text": p["text"]} for p in prepared["passages"]],
        "prediction": prepared["prediction"],
        "prediction_sentences_and_citations": [
            {"id": str(s["sentence_id"]), "sentence": s["sentence"], "citations": s["citations"], "concat": concat(s)}
            for s in statements],
    }


def _inputs(ctx) -> list[tuple[str, dict, str | None]]:
    """(id, record, kind) per response in input order: a citeeval_responses row (kind None) or a
    CiteEval JSON sample (kind "json")."""
    if ctx.has_input("responses") == ctx.has_input("citeeval_json"):
        raise StageError("give exactly one of --input responses=... and --input citeeval_json=...")
    if ctx.has_input("responses"):
        return [(r["response_id"], r, None) for r in ctx.read_rows("responses")]
    path = ctx.input_path("citeeval_json")
    try:
        samples = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as err:
        raise StageError(f"citeeval_json {path}: not UTF-8 (byte 0x{err.object[err.start]:02x} at offset {err.start})") from None
    except (OSError, ValueError) as err:
        raise StageError(f"citeeval_json {path}: not a JSON file: {err}") from None
    if not isinstance(samples, list):
        raise StageError(f"citeeval_json {path}: a CiteEval file is a JSON list of samples")
    return [(sample_id(sample, n), sample, "json") for n, sample in enumerate(samples)]


def run(ctx):
    params = ctx.params
    items = _inputs(ctx)
    if params["limit"]:
        ctx.stats["responses_not_rated_by_limit"] = max(0, len(items) - params["limit"])
        items = items[: params["limit"]]
    exported, seen = [], set()
    for ident, row, kind in items:
        with ctx.item(ident):
            if ident in seen:
                raise Reject("duplicate_id", f"response id {ident} was already prepared")
            seen.add(ident)
            given = None
            if kind == "json":
                row, given = from_citeeval_sample(row, params["model"], ident)
            if not row["passages"] or not row["query"]:
                raise Reject("bad_record", "no passages" if not row["passages"] else "no query")
            prepared, statements = prepare(row, params["min_statement_chars"], given)
            ctx.stats["statements"] += len(statements)
            ctx.stats["uncited_statements"] += sum(1 for s in statements if not s["citations"])
            ctx.stats["dropped_citations"] += len(prepared["dropped_citations"])
            ctx.stats["unanswerable"] += prepared["unanswerable"]
            ctx.stats["thinking_dropped"] += prepared["thinking_dropped"]
            ctx.stats["empty"] += prepared["empty"]
            ctx.stats["thinking_unclosed"] += prepared["thinking_unclosed"]
            ctx.stats["no_answer_reference"] += prepared["no_answer_reference"]
            ctx.write("responses", [prepared])
            ctx.write("statements", statements)
            exported.append(to_citeeval_sample(prepared, statements))
    atomic_write_bytes(ctx.output_path("export"), json.dumps(exported, indent=2, ensure_ascii=False).encode())


STAGE = Stage(
    name="citeeval_prepare",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("citeeval_responses: responses with numbered passages", many=True, optional=True, table="citeeval_responses"),
        "citeeval_json": Input("a file in CiteEval's JSON format", optional=True, kind="file"),
    },
    outputs={
        "responses": Output("citeeval_prepared", "one row per response, post-processed"),
        "statements": Output("citeeval_statements", "one row per statement", counted=False),
        "export": Output(None, "the prepared responses in CiteEval's JSON format"),
    },
    params={
        "model": Param(str, "citeeval-input", "model name for CiteEval-file samples that name none"),
        "min_statement_chars": Param(int, 20, "a statement shorter than this (citations removed) is merged into the one before", min=0),
        "limit": Param(int, 0, "rate only the first N responses (0 = all)", min=0),
    },
    run=run,
    rejects={
        "bad_record": "no query or no passages, or a malformed sample",
        "duplicate_id": "a response id prepared before",
        "empty_response": "nothing left after the thinking block, or no statement",
    },
)

if __name__ == "__main__":
    STAGE.main()

"""Deterministic checks before quality control (MCiteBench §3.3-3.5): what a model-free pass can
catch in (Q, A, E, D) samples, so that a small or careless generator cannot slip them past a
permissive judge. Each check is a reject reason:

- `copies_prompt_example`: the question, or a locating answer, is one of the examples quoted in the
  generation prompts (read from the prompt files named by `example_prompts`, so editing a prompt
  updates the check), or near-identical to one after normalisation (case, punctuation, spacing;
  similarity ratio >= `near_ratio`). The seed's Table 6 examples ("What is the accuracy of Llama3
  on the MMLU dataset?") are what a weak generator copies.
- `repeated_options`: two options of a locating question are the same after normalisation.
- `answer_not_in_evidence`: a locating answer whose content is not in its evidence element: every
  number and every name-like token (an acronym, a mixed-case or alphanumeric name such as
  "Llama3", "GPT-4o", a capitalised word inside the sentence) must occur in the element's text or
  caption, and at least `min_word_overlap` of its content words (4+ letters, not stop words,
  compared by their first 5 letters so inflections match) must. Figures are checked on their
  caption only when `check_figures` is true: the answer to a figure question may be read from the
  image, which has no text to compare.
- `duplicate_question`: a question identical or near-identical (normalised, ratio >= `near_ratio`)
  to an earlier question of the same paper (order: question type, then id); the detail names it.

Inputs:  questions (mcitebench_questions), evidence (mcitebench_evidence), elements (mcitebench_elements)
Outputs: questions (mcitebench_questions: the ones that pass, counted)
Params:  example_prompts, near_ratio, min_word_overlap, check_figures
Invariant: questions in = questions out + rejected.
"""
from __future__ import annotations

import collections
import difflib
import re
import unicodedata

from stages.core.prompts import PROMPTS_DIR, load_prompt
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"

_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d\n]{8,300})[\"\u201d]")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9\-]*")
_STOP = frozenset("""
about above after again against also among because been before being below between both could does doing during
each from further have having here into itself more most much only other over same should since some such than
that their them then there these they this those through under until upon very what when where which while who
whom whose will with would your shows shown show using used uses compared than value values result results
""".split())


def normalise(text: str) -> str:
    """Case, accents, punctuation and spacing folded: "What's  the F1?" -> "what s the f1"."""
    text = unicodedata.normalize("NFKC", text or "").casefold()
    return " ".join(re.sub(r"[^\w]+", " ", text).split())


def similar(a: str, b: str, ratio: float) -> bool:
    return a == b or (bool(a) and bool(b) and difflib.SequenceMatcher(None, a, b).ratio() >= ratio)


def prompt_examples(names: list[str]) -> list[str]:
    """The quoted examples of the named prompt files (normalised), read from the files themselves."""
    examples = []
    for name in names:
        path = PROMPTS_DIR / f"{name}.md"
        if not path.exists():
            raise StageError(f"example_prompts: {path} does not exist")
        examples += [normalise(q) for q in _QUOTED.findall(load_prompt(path).body)]
    return [e for e in dict.fromkeys(examples) if e]


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "").lstrip("+") for n in _NUMBER.findall(text or "")}


def anchors(answer: str) -> tuple[set[str], set[str], set[str]]:
    """(numbers, names, content word stems) of an answer."""
    names, words = set(), set()
    for i, token in enumerate(_WORD.findall(answer)):
        inner_caps = any(c.isupper() for c in token[1:])
        mixed = any(c.isdigit() for c in token) and any(c.isalpha() for c in token)
        if inner_caps or mixed or (i > 0 and token[0].isupper() and len(token) > 1):
            names.add(token.casefold())
        lowered = token.casefold()
        if len(lowered) >= 4 and lowered.isalpha() and lowered not in _STOP:
            words.add(lowered[:5])
    return _numbers(answer), names, words


def grounding_problem(answer: str, evidence_text: str, min_word_overlap: float) -> str | None:
    """Why the answer's content is not in the evidence text, or None when it is."""
    numbers, names, words = anchors(answer)
    folded = evidence_text.casefold()
    have_numbers = _numbers(evidence_text)
    have_words = {w.casefold()[:5] for w in _WORD.findall(evidence_text)}
    missing = sorted(n for n in numbers if n not in have_numbers) + sorted(n for n in names if n not in folded)
    if missing:
        return f"not in the evidence: {', '.join(missing)}"
    if words:
        share = len(words & have_words) / len(words)
        if share < min_word_overlap:
            return f"{share:.0%} of the answer's content words are in the evidence (< {min_word_overlap:.0%})"
    return None


def element_text(e: dict) -> str:
    return "\n".join(t for t in (e["caption"], e["text"]) if t)


def run(ctx):
    p = ctx.params
    examples = prompt_examples(p["example_prompts"])
    ctx.stats["prompt_examples"] = len(examples)
    elements = {e["id"]: e for e in ctx.read_rows("elements")}
    evidence: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ctx.read_rows("evidence"):
        evidence[row["question_id"]].append(row)
    questions = sorted(ctx.read_rows("questions"), key=lambda q: (q["paper_id"], q["question_type"], q["id"]))
    kept_by_paper: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)  # (normalised question, id)
    for q in questions:
        with ctx.item(q["id"]):
            question = normalise(q["question"])
            copied = next((e for e in examples if similar(question, e, p["near_ratio"])), None)
            if copied is None and q["question_type"] == "locating":
                copied = next((e for e in examples if similar(normalise(q["answer"]), e, p["near_ratio"])), None)
            if copied is not None:
                raise Reject("copies_prompt_example", f"{q['question']!r} / {q['answer']!r} copies the prompt example {copied!r}")
            if q["question_type"] == "locating":
                options = [normalise(o) for o in q["options"]]
                repeats = sorted({o for o in options if options.count(o) > 1})
                if repeats:
                    raise Reject("repeated_options", f"options {q['options']} repeat {repeats}")
                shown = [elements[r["element_id"]] for r in evidence[q["id"]] if r["element_id"] in elements]
                if not shown:
                    raise Reject("answer_not_in_evidence", "no evidence element to check the answer against")
                if all(e["modality"] == "figure" for e in shown) and not p["check_figures"]:
                    ctx.stats["grounding_not_checked_figure"] += 1
                else:
                    problem = grounding_problem(q["answer"], "\n".join(element_text(e) for e in shown), p["min_word_overlap"])
                    if problem:
                        raise Reject("answer_not_in_evidence", f"answer {q['answer']!r}: {problem}")
            twin = next((qid for text, qid in kept_by_paper[q["paper_id"]] if similar(question, text, p["near_ratio"])), None)
            if twin is not None:
                raise Reject("duplicate_question", f"{q['question']!r} repeats question {twin} of {q['paper_id']}")
            kept_by_paper[q["paper_id"]].append((question, q["id"]))
            ctx.write("questions", [q])


STAGE = Stage(
    name="check_questions",
    version=VERSION,
    doc=__doc__,
    inputs={
        "questions": Input("questions with evidence and distractors", many=True, table="mcitebench_questions"),
        "evidence": Input("evidence rows", many=True, table="mcitebench_evidence"),
        "elements": Input("parsed paper elements", many=True, table="mcitebench_elements"),
    },
    outputs={"questions": Output("mcitebench_questions", "questions that pass every deterministic check")},
    params={
        "example_prompts": Param(list, ["mcitebench_locating_qa", "mcitebench_explanation_qa"], "prompt files whose quoted examples a question must not copy", items=str),
        "near_ratio": Param(float, 0.9, "similarity ratio (0-1) of normalised texts from which two questions count as the same", min=0, max=1),
        "min_word_overlap": Param(float, 0.5, "least share of a locating answer's content words found in its evidence", min=0, max=1),
        "check_figures": Param(bool, False, "also check answers about figures against their captions"),
    },
    run=run,
    rejects={
        "copies_prompt_example": "the question, or a locating answer, is (nearly) one of the examples quoted in the generation prompts",
        "repeated_options": "two options of a locating question are the same after normalisation",
        "answer_not_in_evidence": "a locating answer whose numbers, names or content words are not in its evidence element",
        "duplicate_question": "(nearly) the same question as an earlier one of the same paper",
    },
)

if __name__ == "__main__":
    STAGE.main()

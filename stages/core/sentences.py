"""Sentences of a model's answer, as the evaluations that score sentence-citation pairs read them
(MCiteBench split_citations, MAVIS mavis_judge, CiteEval citeeval_prepare): every non-empty line
split with blingfire (offline, deterministic), and a "sentence" made only of citation markers
("[2].") joined to the sentence before it, whose claim it cites. Each evaluation says what a
marker is (its citation forms differ)."""
from __future__ import annotations

from typing import Callable, Iterator

import blingfire


def line_sentences(text: str | None) -> Iterator[str]:
    """The non-empty sentences of each non-empty line, stripped, in order."""
    for line in (text or "").splitlines():
        if line.strip():
            for sentence in blingfire.text_to_sentences(line.strip()).split("\n"):
                if sentence.strip():
                    yield sentence.strip()


def answer_sentences(text: str | None, markers_only: Callable[[str], bool]) -> list[str]:
    """`line_sentences`, with a sentence for which `markers_only` holds joined to the one before."""
    sentences: list[str] = []
    for sentence in line_sentences(text):
        if sentences and markers_only(sentence):
            sentences[-1] = f"{sentences[-1]} {sentence}"
        else:
            sentences.append(sentence)
    return sentences

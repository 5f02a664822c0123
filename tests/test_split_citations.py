import json

import pyarrow.parquet as pq
import pytest

from eval_fixtures import response_row
from stages.core.tables import write_table
from stages.eval_mcitebench.split_citations import STAGE, citations_in, parse_response, split_sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        ("This holds [1].", ["[1]"]),
        ("This holds [1][2].", ["[1]", "[2]"]),
        ("This holds [1, 2].", ["[1]", "[2]"]),
        ("This holds [1; 3].", ["[1]", "[3]"]),
        ("This holds [2-4].", ["[2]", "[3]", "[4]"]),
        ("As shown in Figure 3.", ["Figure 3"]),
        ("As shown in Fig. 3.", ["Figure 3"]),
        ("As shown in Figures 2 and 3.", ["Figure 2", "Figure 3"]),
        ("As listed in Table 2.", ["Table 2"]),
        ("As listed in Tab. 2.", ["Table 2"]),
        ("See Figure 3a and Fig. 3(b).", ["Figure 3"]),
        ("Tables 2/3 agree with [1].", ["Table 2", "Table 3", "[1]"]),
        ("Duplicates [1][1] and [1, 1] count once.", ["[1]"]),
        ("No citation at all.", []),
        ("A year [2024] is still a bracketed index.", ["[2024]"]),
    ],
)
def test_citation_forms(text, expected):
    assert citations_in(text) == expected


def test_sentences_lines_and_trailing_markers():
    text = "Claim one.\n[1]\nClaim two [2, 3]. Third. [4].\n\n- a list item Fig. 2"
    assert split_sentences(text) == ["Claim one. [1]", "Claim two [2, 3].", "Third. [4].", "- a list item Fig. 2"]
    assert split_sentences("") == []


def test_unknown_items_are_kept_not_dropped():
    row = response_row("q1", "It rises [1][9]. Figure 7 shows it. Table 2 too [1].", gold=["[1]"])
    parsed, sentences = parse_response(row)
    assert parsed["citations"] == ["[1]", "[9]", "Figure 7", "Table 2"]
    assert parsed["unknown"] == ["[9]", "Figure 7"]
    assert [s["unknown"] for s in sentences] == [["[9]"], ["Figure 7"], []]
    assert parsed["n_sentences"] == 3 and parsed["n_cited_sentences"] == 3


def test_stage_cli_counts(tmp_path):
    rows = [
        response_row("q1", "It rises [1][2]. It falls (Fig. 1).", gold=["[1]"]),
        response_row("q2", "", gold=["Table 2"]),
        response_row("q3", "No citations here. None at all.", gold=["[3]"]),
    ]
    write_table(tmp_path / "responses.parquet", rows, "eval_responses")
    STAGE.main([
        "--input", f"responses={tmp_path / 'responses.parquet'}",
        "--output", f"citations={tmp_path / 'citations.parquet'}",
        "--output", f"sentences={tmp_path / 'sentences.parquet'}",
    ])
    citations = pq.read_table(tmp_path / "citations.parquet").to_pylist()
    sentences = pq.read_table(tmp_path / "sentences.parquet").to_pylist()
    assert [c["citations"] for c in citations] == [["[1]", "[2]", "Figure 1"], [], []]
    assert len(sentences) == 4  # 2 + 0 + 2: an empty response has no sentence but keeps its row
    report = json.loads((tmp_path / "citations.parquet.report.json").read_text())
    assert report["rows_in"] == 3 and report["rows_out"]["citations"] == 3 and report["rejected"] == 0
    assert report["stats"]["responses_without_citations"] == 2

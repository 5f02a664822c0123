"""citeeval_prepare (CiteEval App. C.2 post-processing, CiteEval JSON import/export) through its real
CLI on hand-made inputs."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from stages.core.tables import write_table

PASSAGES = [{"id": k, "title": f"T{k}", "text": f"passage {k} text", "mode": "text"} for k in (1, 2, 3)]


def responses_file(tmp_path, texts: dict[str, str]):
    rows = [{"response_id": rid, "model": "m", "source": "mcitebench", "query": "Why is the sky blue?", "passages": PASSAGES,
             "response": text, "mode": "text"} for rid, text in texts.items()]
    path = tmp_path / "responses.parquet"
    write_table(path, rows, "citeeval_responses")
    return path


def prepare(tmp_path, *inputs, params="{}"):
    out = {name: tmp_path / f"{name}.out" for name in ("responses", "statements", "export")}
    run_stage("citeeval_prepare", *inputs, "--output", f"responses={out['responses']}", "--output", f"statements={out['statements']}",
              "--output", f"export={out['export']}", "--params", params)
    statements = {}
    for s in pq.read_table(out["statements"]).to_pylist():
        statements.setdefault(s["response_id"], []).append((s["sentence"], s["citations"], s["dropped"]))
    return pq.read_table(out["responses"]).to_pylist(), statements, json.loads(out["export"].read_text()), out


def test_post_processing_rules(tmp_path):
    texts = {
        "leading": "The sky scatters blue light strongly [1]. [2] Sunsets look red because of longer paths [3].",
        "fragment": "Rayleigh scattering explains the colour [1]. Yes [2]. Blue light has a short wavelength [3].",
        "range": "Short waves scatter more than long ones [1][7][0].",
        "duplicates": "Air molecules scatter sunlight in all directions [2][2][1][2].",
        "thinking": "<thinking>The passages say scattering [9].</thinking>\nScattering by air makes the sky blue [1].",
        "unclosed": "Scattering by the air makes it blue [1]. <thinking> now let me think about passage 2",
        "no_answer": "<thinking>Nothing relevant.</thinking> No answer is found.",
        "empty": "<thinking>only thoughts, the answer never came",
        "hedged": "The passages do not mention the cause. Air scatters light in all directions [1].",
    }
    responses, statements, export, out = prepare(tmp_path, "--input", f"responses={responses_file(tmp_path, texts)}")
    assert statements["leading"] == [("The sky scatters blue light strongly.", [1, 2], []),
                                     ("Sunsets look red because of longer paths.", [3], [])]
    assert statements["fragment"] == [("Rayleigh scattering explains the colour. Yes.", [1, 2], []),
                                      ("Blue light has a short wavelength.", [3], [])]
    assert statements["range"] == [("Short waves scatter more than long ones.", [1], [7, 0])]
    assert statements["duplicates"] == [("Air molecules scatter sunlight in all directions.", [2, 1], [])]
    assert statements["thinking"] == [("Scattering by air makes the sky blue.", [1], [])]
    assert statements["unclosed"] == [("Scattering by the air makes it blue.", [1], [])]
    assert statements["no_answer"] == [("No answer is found.", [], [])]
    by_id = {r["id"]: r for r in responses}
    assert by_id["no_answer"]["unanswerable"] and not by_id["leading"]["unanswerable"]
    assert by_id["thinking"]["thinking_dropped"] and by_id["thinking"]["prediction"] == "Scattering by air makes the sky blue [1]."
    assert by_id["range"]["dropped_citations"] == [7, 0]
    # kept without statements: strict leaves it out of the means, the reference mode rates it as the public code does
    assert (by_id["empty"]["empty"], by_id["empty"]["n_statements"], "empty" in statements) == (True, 0, False)
    assert [r for r, row in by_id.items() if row["thinking_unclosed"]] == ["unclosed", "empty"]
    # the public "no answer" regex over the text the public code keeps: "no answer ... found", "not mention"
    assert [r for r, row in by_id.items() if row["no_answer_reference"]] == ["no_answer", "hedged"]
    assert not by_id["hedged"]["unanswerable"] and len(statements["hedged"]) == 2
    assert json.loads((tmp_path / "responses.out.report.json").read_text())["rejected"] == 0
    assert [s["sample_idx"] for s in export] == [r["id"] for r in responses]


def test_citeeval_json_round_trip(tmp_path):
    samples = [{
        "sample_idx": "ex1", "query": "can use hkd in shenzhen?",
        "passages": [{"id": "1", "title": "", "text": "HKD is almost useless in Shenzhen."},
                     {"id": "2", "title": "t", "text": "You may find a merchant who takes HKD."}],
        "prediction": "HKD is almost useless in Shenzhen [1]. Some merchants take it [2][1].",
        "prediction_sentences_and_citations": [
            {"id": "1", "sentence": "HKD is almost useless in Shenzhen.", "citations": [1], "concat": "HKD is almost useless in Shenzhen. [1]"},
            {"id": "2", "sentence": "Some merchants take it.", "citations": [2, 1], "concat": "Some merchants take it. [2][1]"},
            {"id": "3", "sentence": "Final answer: no.", "citations": [], "concat": "Final answer: no."}],
    }]
    given = tmp_path / "in.citeeval.json"
    given.write_text(json.dumps(samples))
    _, statements, export, out = prepare(tmp_path, "--input", f"citeeval_json={given}")
    assert export == samples
    assert statements["ex1"][2] == ("Final answer: no.", [], [])
    # the export reads back to the same statements
    again = tmp_path / "again"
    again.mkdir()
    _, statements2, export2, _ = prepare(again, "--input", f"citeeval_json={out['export']}")
    assert statements2 == statements and export2 == samples


def test_system_output_format_is_split(tmp_path):
    given = tmp_path / "system.json"
    given.write_text(json.dumps([{"id": "s1", "query": "q?", "passages": [{"text": "a"}, {"text": "b"}],
                                  "pred": "The first claim is supported here [1]. [2] The second claim is here too."},
                                 {"id": "s2", "query": "q?", "passages": "not a list", "pred": "x"},
                                 {"id": "s3", "query": "q?", "passages": [{"id": "\u00b2", "text": "a"}], "pred": "x"}]))  # "²": isdigit, not int
    responses, statements, export, out = prepare(tmp_path, "--input", f"citeeval_json={given}", params='{"model": "sys-a"}')
    assert statements["s1"] == [("The first claim is supported here.", [1, 2], []), ("The second claim is here too.", [], [])]
    assert responses[0]["model"] == "sys-a" and [p["id"] for p in responses[0]["passages"]] == [1, 2]
    assert export[0]["passages"][1] == {"id": "2", "title": "", "text": "b"}
    rejects = pq.read_table(f"{out['responses']}.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("s2", "bad_record"), ("s3", "bad_record")]
    assert "has id '\u00b2', not a number" in rejects[1]["detail"]


def test_limit_rates_the_first_responses(tmp_path):
    texts = {f"r{i}": f"Claim number {i} is supported by evidence [1]." for i in range(4)}
    responses, _, _, out = prepare(tmp_path, "--input", f"responses={responses_file(tmp_path, texts)}", params='{"limit": 2}')
    assert [r["id"] for r in responses] == ["r0", "r1"]
    assert json.loads((tmp_path / "responses.out.report.json").read_text())["stats"]["responses_not_rated_by_limit"] == 2


@pytest.mark.parametrize("text, expected", [
    ("No answer is found.", True),
    ("no answer was found in the passages", True),
    ("No answer is found. But the sky is blue [1].", False),
])
def test_unanswerable_detection(text, expected):
    from stages.citeeval.citeeval_prepare import is_unanswerable, split_statements

    assert is_unanswerable(split_statements(text, 20)) is expected


@pytest.mark.parametrize("text, expected", [
    ("There is no information about the cause.", True),   # no ... information
    ("The reason is not provided in the sources.", True),  # not ... provided
    ("No. The answer depends on the season.", True),       # no ... answer, within 30 characters
    ("The exact value was not found to matter.", True),    # not ... found
    ("Nothing is known about it.", False),                  # "Nothing" is not the word "no"
    ("No, the sky scatters blue light most strongly of all colours in sunlight.", False),  # nothing listed within 30
    ("The sky is blue [1].", False),
])
def test_public_no_answer_regex(text, expected):
    """split_response_into_sentences_and_citations.is_no_answer_prediction's pattern, searched anywhere."""
    from stages.citeeval.citeeval_prepare import is_public_no_answer

    assert is_public_no_answer(text) is expected


def test_malformed_citeeval_samples_are_bad_records_naming_the_field(tmp_path):
    """Each sample below has one wrong field: a bad_record naming it, never a traceback, a wrong
    value or a run that dies at write; the good sample (integer sample_idx, BOM before the file) is kept."""
    ok = {"query": "q?", "passages": [{"id": "1", "title": "", "text": "A."}, {"id": "2", "title": "t", "text": "B."}],
          "prediction": "A is so [1]. B too [2]."}

    def sentences(sentence, citations):
        return {"prediction_sentences_and_citations": [{"sentence": sentence, "citations": citations}]}

    samples = [
        {**ok, "sample_idx": 7},
        ok, ok,  # no sample_idx: each its own reject (they used to share the id "None")
        {**ok, "sample_idx": [1]},
        {**ok, "sample_idx": "s", **sentences(5, [1])},
        {**ok, "sample_idx": "c", **sentences("A is so.", "12")},
        {**ok, "sample_idx": "f", **sentences("A is so.", [1.9, True])},
        {**ok, "sample_idx": "p", "passages": [{"id": "1", "text": "A."}, {"id": "01", "text": "B."}]},
        {**ok, "sample_idx": "m", "model": 7},
        {**ok, "sample_idx": "t", "passages": [{"id": 1, "title": 5, "text": "A."}]},
        {**ok, "sample_idx": "l", "prediction_sentences_and_citations": "A is so [1]."},
    ]
    given = tmp_path / "in.json"
    given.write_bytes(b"\xef\xbb\xbf" + json.dumps(samples).encode())
    responses, statements, _, out = prepare(tmp_path, "--input", f"citeeval_json={given}")
    assert [r["id"] for r in responses] == ["7"] and statements["7"] == [("A is so. B too.", [1, 2], [])]
    rejects = [(r["id"], r["reason"], r["detail"]) for r in pq.read_table(f"{out['responses']}.rejects.parquet").to_pylist()]
    assert rejects == [
        ("sample:1", "bad_record", "sample_idx None is not an id (a string or an integer)"),
        ("sample:2", "bad_record", "sample_idx None is not an id (a string or an integer)"),
        ("sample:3", "bad_record", "sample_idx [1] is not an id (a string or an integer)"),
        ("s", "bad_record", "sentence 1: its sentence is 5, not text"),
        ("c", "bad_record", "sentence 1: its citations are '12', not a list of passage numbers"),
        ("f", "bad_record", "sentence 1: its citations are [1.9, True], not a list of passage numbers"),
        ("p", "bad_record", "passages 1 and 2 both have id 1"),
        ("m", "bad_record", "sample without a valid model"),
        ("t", "bad_record", "passage 1 has title 5, not a string"),
        ("l", "bad_record", "prediction_sentences_and_citations is 'A is so [1].', not a list"),
    ]


def test_a_citeeval_file_that_is_not_utf8_fails_in_one_line(tmp_path):
    given = tmp_path / "latin1.json"
    given.write_bytes('[{"sample_idx": "x", "query": "caf\u00e9?", "passages": [], "prediction": ""}]'.encode("latin-1"))
    result = run_stage("citeeval_prepare", "--input", f"citeeval_json={given}", *[x for n in ("responses", "statements", "export")
                                                                                 for x in ("--output", f"{n}={tmp_path / n}")], check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"citeeval_json {given}: not UTF-8 (byte 0xe9" in result.stderr

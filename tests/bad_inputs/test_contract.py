"""Bad rows in the tables stages hand each other (issue 32), each with the outcome a user sees: a
reject with its reason (the runner's contract reasons null_column, bad_value, duplicate_id from
stages/core/tables.py, or the stage's own), or one line naming the input; never a traceback, a
silent loss or a duplicate output id. Each stage runs once through its real CLI with all its cases
in its input; the cases are checked one by one. Model stages talk to tests/schema_llm.py, a local
OpenAI-compatible server that answers every call with the plainest schema-valid answer."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from schema_llm import plain_llm_server
from stages.core.tables import table_contract, table_schema

REPO = Path(__file__).resolve().parents[2]


PATTERN_SAMPLES = {"[0-9a-f]{64}": "0" * 64, "([0-9a-f]{64})?": ""}  # a value matching each declared pattern of a text column


def valid(table: str, **values) -> dict:
    """A row of `table` that keeps its contract, with `values` put in (which may break it)."""
    contract = table_contract(table)
    row = {}
    for f in table_schema(table):
        if f.name in contract.nullable:
            row[f.name] = None
        elif f.name in contract.patterns and pa.types.is_string(f.type):
            row[f.name] = PATTERN_SAMPLES[contract.patterns[f.name]]
        elif f.name in contract.values:
            row[f.name] = sorted(contract.values[f.name])[0] if not pa.types.is_list(f.type) else []
        elif pa.types.is_list(f.type):
            row[f.name] = []
        elif pa.types.is_string(f.type):
            row[f.name] = f"{f.name} text"
        elif pa.types.is_boolean(f.type):
            row[f.name] = False
        elif pa.types.is_integer(f.type) or pa.types.is_floating(f.type):
            low = (contract.ranges.get(f.name) or (None, None))[0]
            row[f.name] = low if low is not None else 1
        else:
            raise NotImplementedError(f.type)
    return {**row, **values}


def crafted(path: Path, table: str, rows: list[dict]) -> str:
    """Rows written as they are (no stage would write them: the writers check the contract)."""
    pq.write_table(pa.Table.from_pylist(rows, schema=table_schema(table)), path)
    return str(path)


def outcome(out: Path) -> tuple[dict, dict, list[dict]]:
    """(id -> (reason, detail) of the rejects (the last, where an id has several), the report, the output rows)."""
    rejects = {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    return rejects, json.loads(Path(f"{out}.report.json").read_text()), pq.read_table(out).to_pylist()


def assert_counts(report: dict, counted: tuple[str, ...] | None = None) -> None:
    out = sum(n for name, n in report["rows_out"].items() if counted is None or name in counted)
    assert report["rows_in"] == out + report["rejected"], report


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llm")
    with plain_llm_server() as url:
        yield {"backend": "openai", "model": "plain", "max_attempts": 1, "cache": {"mode": "off"}, "image_store": str(folder / "images"),
               "openai": {"base_url": url, "max_in_flight": 1, "max_retries": 1}}


# --- decide_entailment: scores that are no probabilities, a modality it does not know ------------
PAIRS = [valid("mavis_fact_documents", fact_id="f1", doc_id=d, rank=1) for d in ("c4:ok", "c4:audio", "c4:null", "c4:nan", "c4:7", "c4:-3")]
SCORE_CASES = {  # the doc_id of the case's score row -> (its changes, expected reason)
    "c4:audio": ({"modality": "audio"}, "bad_value"),
    "c4:null": ({"score": None}, "null_column"),
    "c4:nan": ({"score": math.nan}, "bad_value"),
    "c4:7": ({"score": 7.0}, "bad_value"),
    "c4:-3": ({"score": -3.0}, "bad_value"),
}


@pytest.fixture(scope="module")
def decided(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decide")
    scores = [valid("mavis_entailment_scores", fact_id="f1", doc_id="c4:ok", modality="text", mode="text", score=0.9)]
    scores += [valid("mavis_entailment_scores", **{"fact_id": "f1", "doc_id": d, "modality": "text", "mode": "text", "score": 0.9, **changes})
               for d, (changes, _) in SCORE_CASES.items()]
    out = tmp / "out" / "judged.parquet"
    run_stage("decide_entailment", f"--input=fact_documents={crafted(tmp / 'pairs.parquet', 'mavis_fact_documents', PAIRS)}",
              f"--input=scores={crafted(tmp / 'scores.parquet', 'mavis_entailment_scores', scores)}", f"--output=judged={out}")
    return outcome(out)


@pytest.mark.parametrize("doc", sorted(SCORE_CASES))
def test_decide_entailment_bad_score_row(decided, doc):
    rejects, report, rows = decided
    assert rejects[f"f1|{doc}"][0] == SCORE_CASES[doc][1], rejects
    assert [r["doc_id"] for r in rows] == ["c4:ok"] and rows[0]["entailed"]  # 7.0 is never marked entailed
    assert_counts(report)


# --- the entailment filters: a document with no text, or a modality spelled otherwise --------------
DOC_CASES = {"c4:nulltext": ({"text": None}, "null_column"), "c4:upper": ({"modality": "TEXT"}, "bad_value"),
             "c4:nullmod": ({"modality": None}, "null_column")}


@pytest.fixture(scope="module")
def entailed(tmp_path_factory, llm):
    tmp = tmp_path_factory.mktemp("entail")
    facts = [valid("mavis_facts", fact_id="f1", text="Ash melts in engines.")]
    docs = [valid("mavis_documents", doc_id="c4:ok", modality="text", text="Volcanic ash melts inside jet engines.")]
    docs += [valid("mavis_documents", **{"doc_id": d, "modality": "text", "text": "A passage.", **changes}) for d, (changes, _) in DOC_CASES.items()]
    pairs = [valid("mavis_fact_documents", fact_id="f1", doc_id=d["doc_id"], rank=1) for d in docs]
    out = tmp / "out" / "scores.parquet"
    run_stage("filter_entailment_text", f"--input=facts={crafted(tmp / 'f.parquet', 'mavis_facts', facts)}",
              f"--input=documents={crafted(tmp / 'd.parquet', 'mavis_documents', docs)}",
              f"--input=fact_documents={crafted(tmp / 'p.parquet', 'mavis_fact_documents', pairs)}",
              f"--output=scores={out}", "--params", json.dumps({"llm": llm}))
    return outcome(out)


@pytest.mark.parametrize("doc", sorted(DOC_CASES))
def test_filter_entailment_text_bad_document(entailed, doc):
    rejects, report, rows = entailed
    assert rejects[doc][0] == DOC_CASES[doc][1], rejects  # the document row, rejected on read
    assert rejects[f"f1|{doc}"][0] == "unknown_document"  # and its pair, counted: never skipped unseen
    assert [r["doc_id"] for r in rows] == ["c4:ok"]
    assert report["rejected_on_read"] == {"documents": 3}
    assert_counts(report)


# --- extract_atomic_facts: a null id, a null answer, an instance id twice ---------------------------
@pytest.fixture(scope="module")
def extracted(tmp_path_factory, llm):
    tmp = tmp_path_factory.mktemp("facts")
    answer = "Air scatters blue light the most. So the sky looks blue."
    rows = [valid("reddit_instances", id="reddit:p1/c1", post_id="reddit:p1", answer=answer),
            valid("reddit_instances", id=None, post_id="reddit:p2", answer=answer),
            valid("reddit_instances", id="reddit:p3/c3", post_id="reddit:p3", answer=None),
            valid("reddit_instances", id="reddit:p1/c1", post_id="reddit:p1", answer="A second answer under the same id.")]
    out = tmp / "out" / "facts.parquet"
    run_stage("extract_atomic_facts", f"--input=instances={crafted(tmp / 'i.parquet', 'reddit_instances', rows)}", f"--output=facts={out}",
              "--params", json.dumps({"llm": llm}))
    return outcome(out)


@pytest.mark.parametrize("item, reason", [("i.parquet row 1", "null_column"), ("reddit:p3/c3", "null_column"),
                                          ("reddit:p1/c1", "duplicate_id")])
def test_extract_atomic_facts_bad_instance(extracted, item, reason):
    rejects, report, rows = extracted
    assert rejects[item][0] == reason, rejects
    # only the first reddit:p1/c1 is split (two sentences); its facts, kept or rejected, have one id each
    assert report["stats"]["sentences"] == 2 and report["rejected_on_read"] == {"instances": 3}
    facts = [r["fact_id"] for r in rows] + [i for i, (why, _) in rejects.items() if why in ("duplicate_fact", "irrelevant", "provided_by_asker")]
    assert len(facts) == len(set(facts)) == report["stats"]["facts_extracted"] and all(f.startswith("reddit:p1/c1#") for f in facts)


# --- filter_visual_dependency: a null id ----------------------------------------------------------------
def test_filter_visual_dependency_null_id(tmp_path, llm):
    rows = [valid("reddit_instances", id=None, question="What is this?"), valid("reddit_instances", id="reddit:p1/c1")]
    out = tmp_path / "out" / "instances.parquet"
    run_stage("filter_visual_dependency", f"--input=instances={crafted(tmp_path / 'i.parquet', 'reddit_instances', rows)}",
              f"--output=instances={out}", f"--output=responses={tmp_path / 'out' / 'r.parquet'}",
              f"--output=verdicts={tmp_path / 'out' / 'v.parquet'}",
              "--params", json.dumps({"answerers": [{"name": "blind", "llm": llm}], "judge": llm}))
    rejects, report, _ = outcome(out)
    assert rejects["i.parquet row 0"][0] == "null_column" and "column 'id' is null" in rejects["i.parquet row 0"][1]
    assert_counts(report, counted=("instances",))


# --- gather_images and score_elements: page elements with holes -------------------------------------
def elements() -> list[dict]:
    text = valid("retrieval_elements", element_id="el:t", page_id="page:1", query_id="q1", order=0, kind="text",
                 text="Intro <image_1> more", image_url="", placeholder=None)
    image = valid("retrieval_elements", element_id="el:i", page_id="page:1", query_id="q1", order=1, kind="image",
                  text="alt", image_url="https://img.test/1.png", placeholder=1)
    return [text, image,
            {**image, "element_id": "el:nullpage", "page_id": None},
            {**image, "element_id": "el:nullorder", "order": None},
            {**text, "element_id": "el:nulltext", "page_id": "page:2", "text": None},
            {**text, "element_id": "el:upper", "kind": "TEXT"},
            {**text, "element_id": "el:nullkind", "kind": None}]


ELEMENT_CASES = {"el:nullpage": "null_column", "el:nullorder": "null_column", "el:nulltext": "null_column", "el:upper": "bad_value",
                 "el:nullkind": "null_column"}


@pytest.fixture(scope="module")
def gathered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gather")
    out = tmp / "out" / "refs.parquet"
    run_stage("gather_images", f"--input=elements={crafted(tmp / 'e.parquet', 'retrieval_elements', elements())}", f"--output=refs={out}")
    return outcome(out)


@pytest.mark.parametrize("element", sorted(ELEMENT_CASES))
def test_gather_images_bad_element(gathered, element):
    rejects, report, rows = gathered
    assert rejects[element][0] == ELEMENT_CASES[element], rejects
    assert [(r["id"], r["context"]) for r in rows] == [("el:i", "Intro more")]
    assert report["rejected_on_read"] == {"elements": len(ELEMENT_CASES)}


@pytest.fixture(scope="module")
def scored(tmp_path_factory, llm):
    tmp = tmp_path_factory.mktemp("score")
    query = valid("m2rag_sampled_queries", id="q1", question="Why is the sky blue?", categories=[1], category_names=["science"],
                  sample_category=1)
    queries = [query, {**query, "question": "A second query under the same id"}]
    out = tmp / "out" / "scored.parquet"
    run_stage("score_elements", f"--input=elements={crafted(tmp / 'e.parquet', 'retrieval_elements', elements())}",
              f"--input=queries={crafted(tmp / 'q.parquet', 'm2rag_sampled_queries', queries)}", f"--output=scored_elements={out}",
              "--params", json.dumps({"llm": llm, "kinds": ["text"]}))
    return outcome(out)


@pytest.mark.parametrize("element", ["el:nullorder", "el:upper", "el:nullkind", "q1"])
def test_score_elements_bad_element_or_query(scored, element):
    rejects, report, rows = scored
    assert rejects[element][0] == {**ELEMENT_CASES, "q1": "duplicate_id"}[element], rejects
    assert [r["element_id"] for r in rows] == ["el:t"]  # the first q1 scored it; TEXT and null kinds counted, not skipped
    assert report["rejected_on_read"] == {"elements": len(ELEMENT_CASES), "queries": 1}
    assert_counts(report)  # the image element is not of the scored kinds: neither read as an item nor rejected


# --- split_pages: a null markdown, an unclosed IPv6 url, a page id twice ------------------------------
@pytest.fixture(scope="module")
def split(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("split")
    page = valid("retrieval_pages", id="page:1", query_id="q1", url="https://a.test/", final_url="https://a.test/",
                 markdown="Some text.\n\n![a pic](pic.png)", reader="local")
    pages = [page, {**page, "id": "page:null", "markdown": None},
             {**page, "id": "page:v6", "url": "http://[::1", "final_url": "http://[::1"},
             {**page, "markdown": "The same page id again.\n\n![b](https://b.test/b.png)"}]
    out = tmp / "out" / "elements.parquet"
    run_stage("split_pages", f"--input=pages={crafted(tmp / 'p.parquet', 'retrieval_pages', pages)}", f"--output=elements={out}")
    return outcome(out)


def test_split_pages_null_markdown_and_repeated_page(split):
    rejects, report, rows = split
    assert rejects["page:null"][0] == "null_column" and rejects["page:1"][0] == "duplicate_id"
    ids = [r["element_id"] for r in rows]
    assert len(ids) == len(set(ids))
    assert report["rows_in"] == 4 and report["rejected"] == 3


def test_split_pages_unclosed_ipv6_url(split):
    rejects, _, rows = split
    # its relative image url cannot be resolved against it: the page is rejected, naming the url
    assert rejects["page:v6"][0] == "bad_url" and not [r for r in rows if r["page_id"] == "page:v6"]


# --- fetch_pages: a null url, one url twice for a query ------------------------------------------------
def test_fetch_pages_null_url_and_repeated_page(tmp_path):
    result = valid("retrieval_search_results", id="result:1", query_id="q1", kind="page", url="https://not-archived.test/a", rank=1,
                   provider="google")
    results = [result, {**result, "id": "result:null", "url": None}, {**result, "id": "result:2", "rank": 2}]
    out = tmp_path / "out" / "pages.parquet"
    run_stage("fetch_pages", f"--input=results={crafted(tmp_path / 'r.parquet', 'retrieval_search_results', results)}",
              f"--input=warcs={REPO / 'data/samples/retrieval/web.warc.gz'}", f"--output=pages={out}",
              "--params", json.dumps({"fetch": {"mode": "replay"}, "store": str(tmp_path / "pages")}))
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert sorted(r["reason"] for r in rejects) == ["duplicate_page", "not_in_archive", "null_column"], rejects
    assert {r["id"] for r in rejects if r["reason"] == "null_column"} == {"result:null"}
    assert_counts(json.loads(Path(f"{out}.report.json").read_text()))


# --- sample_queries: a null id, null or empty categories ---------------------------------------------------
def test_sample_queries_null_id_and_missing_categories(tmp_path):
    query = valid("m2rag_classified_queries", id="q1", categories=[3], category_names=["x"])
    rows = [query, {**query, "id": None}, {**query, "id": "q-null", "categories": None}, {**query, "id": "q-empty", "categories": []},
            {**query, "id": "q-others", "categories": [11]}]
    out = tmp_path / "out" / "sampled.parquet"
    run_stage("sample_queries", f"--input=classified_queries={crafted(tmp_path / 'c.parquet', 'm2rag_classified_queries', rows)}",
              f"--output=sampled_queries={out}", "--params", json.dumps({"per_category": 1}))
    rejects, report, rows = outcome(out)
    assert {k: v[0] for k, v in rejects.items()} == {"c.parquet row 1": "null_column", "q-null": "null_column", "q-empty": "no_categories"}
    assert [r["id"] for r in rows] == ["q1"] and report["stats"]["others_only"] == 1  # only the real Others query


# --- search_web and retrieve_text: a query with a null id is never searched as '' --------------------
def test_search_web_null_query_id(tmp_path):
    queries = tmp_path / "queries.parquet"
    pq.write_table(pa.table({"id": pa.array([None, ""], pa.string()), "text": ["why is the sky blue", "how do volcanoes erupt"]}), queries)
    out = tmp_path / "out" / "results.parquet"
    run_stage("search_web", f"--input=queries={queries}", f"--output=results={out}",
              "--params", json.dumps({"provider": "searxng", "provider_settings": {"endpoint": "http://127.0.0.1:9"},
                                      "cache_dir": str(tmp_path / "cache")}))
    rejects, report, rows = outcome(out)
    assert rejects == {"queries.parquet row 0": ("null_column", "column 'id' is null (queries.parquet row 0)"),
                       "queries.parquet row 1": ("bad_value", "key column 'id' is empty (queries.parquet row 1)")}
    assert rows == [] and report["rows_in"] == 2


# --- review sheets: one item, two decisions ---------------------------------------------------------------
def test_review_sheet_with_two_decisions_for_one_question_fails_naming_it(tmp_path):
    sheet = tmp_path / "review.csv"
    sheet.write_text("question_id,decision,note\nmcq:1,keep,\nmcq:2,reject,off topic\nmcq:1,reject,\n")
    paths = {name: crafted(tmp_path / f"{name}.parquet", table, []) for name, table in
             (("questions", "mcitebench_questions"), ("evidence", "mcitebench_evidence"), ("distractors", "mcitebench_distractors"),
              ("elements", "mcitebench_elements"))}
    out = tmp_path / "out"
    result = run_stage("release_mcitebench", *(f"--input={k}={v}" for k, v in paths.items()), f"--input=review={sheet}",
                       f"--output=manifest={out / 'release.json'}", "--params", json.dumps({"releases_dir": str(tmp_path / "releases")}),
                       check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"review sheet {sheet}: mcq:1 is on line 2 and again on line 4 with different values" in last, last
    assert not out.exists() or not any(out.iterdir())


# --- mavis_validate_judge: a judgement marked answered that carries no score ------------------------
def test_mavis_validate_judge_answered_judgement_without_score(tmp_path):
    from mavis_eval_fixtures import build_release

    release = build_release(tmp_path / "rel" / "v1")
    judgement = {"response_id": "r1", "model": "cand", "judge": "j", "instance_id": "reddit:p1/c1", "scoring": "strict", "kind": "relevance",
                 "sentence_index": 0, "ok": True}
    judgements = [valid("mavis_eval_judgements", id="j-scored", score=0.5, **judgement), valid("mavis_eval_judgements", id="j-unscored", **judgement)]
    paths = [f"--input={name}={crafted(tmp_path / f'{name}.parquet', table, rows)}" for name, table, rows in
             (("responses", "mavis_eval_responses", []), ("sentences", "mavis_eval_sentences", []),
              ("judgements", "mavis_eval_judgements", judgements))]
    labels = tmp_path / "labels.csv"
    labels.write_text("judgement_id,human_score\nj-scored,1\nj-unscored,0.5\n")
    out = tmp_path / "out"
    run_stage("mavis_validate_judge", *paths, f"--input=release={release}", f"--input=labels={labels}", f"--output=labels={out / 'labels.parquet'}",
              f"--output=agreement={out / 'agreement.parquet'}", f"--output=label_sheet={out / 'sheet.csv'}")
    rejects, report, rows = outcome(out / "labels.parquet")
    assert [r["judgement_id"] for r in rows] == ["j-scored"] and rows[0]["judge_score"] == 0.5
    assert rejects["j-unscored"][0] == "no_judgement"  # nothing to compare a human score with: not on the sheet
    assert report["stats"]["unscored_judgements"] == 1 and "j-unscored" not in (out / "sheet.csv").read_text()
    assert_counts(report, ("labels",))


# --- citeeval_editdist: public-parser edits citeeval_itercoe never writes ----------------------------
def test_citeeval_editdist_reference_edit_off_its_contract(tmp_path):
    statements = [valid("citeeval_statements", id=s, citations=[1]) for s in ("s-ok", "s-reason0", "s-reason7", "s-keep", "s-nullreason")]
    edit = {"op": "DELETE", "citation": "2", "reason": 1}
    ratings = [valid("citeeval_itercoe", id=s, reference_edits=[{**edit, **changes}]) for s, changes in
               (("s-ok", {}), ("s-reason0", {"reason": 0}), ("s-reason7", {"reason": 7}), ("s-keep", {"op": "KEEP"}), ("s-nullreason", {"reason": None}))]
    out = tmp_path / "out" / "distances.parquet"
    run_stage("citeeval_editdist", f"--input=statements={crafted(tmp_path / 's.parquet', 'citeeval_statements', statements)}",
              f"--input=ratings={crafted(tmp_path / 'r.parquet', 'citeeval_itercoe', ratings)}", f"--output=distances={out}")
    rejects, report, rows = outcome(out)
    # a null reason breaks the table's contract (a struct field not declared nullable): rejected on read
    assert {k: v[0] for k, v in rejects.items()} == {**dict.fromkeys(["s-reason0", "s-reason7", "s-keep"], "bad_edit"), "s-nullreason": "null_column"}, rejects
    assert [r["id"] for r in rows] == ["s-ok"]
    assert_counts(report)


# --- citeeval_from_m2rag: a placed image that names no input image, input images numbered twice -----
def test_citeeval_from_m2rag_output_image_naming_no_input(tmp_path):
    image = {"n": 1, "source": "page", "page_rank": 1, "url": "u", "sha256": "5" * 64, "thumb_sha256": "", "caption": "A dog.", "caption_mode": "m",
             "score": 0.5, "shown": "caption"}
    placed = {"response": "Dogs bark. ![A dog.](image_1)", "output_images": [{"n": 1, "start": 11, "end": 29}]}
    responses = [valid("m2rag_responses", id="ok", inputs=[image], **placed),
                 valid("m2rag_responses", id="unknown", inputs=[{**image, "n": 2}], **placed),
                 valid("m2rag_responses", id="twice", inputs=[image, image], **placed)]
    out = tmp_path / "out" / "responses.parquet"
    run_stage("citeeval_from_m2rag", f"--input=responses={crafted(tmp_path / 'r.parquet', 'm2rag_responses', responses)}", f"--output=responses={out}")
    rejects, report, rows = outcome(out)
    assert rejects == {"unknown": ("bad_response", "output images [1] name no input image"),
                       "twice": ("bad_response", "input images numbered twice: [1, 1]")}, rejects
    assert [r["response_id"] for r in rows] == ["ok"] and rows[0]["response"] == "Dogs bark. \n[1]\n"  # no page text: image 1 is passage 1
    assert_counts(report)


# --- m2rag_judge: a response row with no answer text (m2rag_generate writes none) -------------------
def test_m2rag_judge_null_answer(tmp_path, llm):
    responses = [valid("m2rag_responses", id="ok", response="Dogs bark."), valid("m2rag_responses", id="null", response=None)]
    out = tmp_path / "out" / "judgements.parquet"
    run_stage("m2rag_judge", f"--input=responses={crafted(tmp_path / 'r.parquet', 'm2rag_responses', responses)}", f"--output=judgements={out}",
              "--params", json.dumps({"judge": "plain", "llm": llm}))
    rejects, report, rows = outcome(out)
    assert rejects["null"] == ("null_column", "column 'response' is null (input 'responses', r.parquet row 1)"), rejects
    assert {r["response_id"] for r in rows} == {"ok"} and report["rows_in"] == 2


# --- mavis_judge: a response with a null answer or raw output (mavis_generate_answers writes '') ----
def test_mavis_judge_null_answer_or_raw(tmp_path, llm):
    from mavis_eval_fixtures import build_release

    release = build_release(tmp_path / "rel" / "v1")
    responses = [valid("mavis_eval_responses", id=i, instance_id="reddit:p1/c1", **changes) for i, changes in
                 (("ok", {"raw": "Low nitrogen.", "answer": "Low nitrogen."}), ("null-answer", {"raw": "x", "answer": None}),
                  ("null-raw", {"raw": None, "answer": "x"}))]
    out = tmp_path / "out"
    run_stage("mavis_judge", f"--input=responses={crafted(tmp_path / 'r.parquet', 'mavis_eval_responses', responses)}", f"--input=release={release}",
              f"--output=judgements={out / 'judgements.parquet'}", f"--output=sentences={out / 'sentences.parquet'}",
              "--params", json.dumps({"judge": "plain", "llm": llm}))
    rejects, report, rows = outcome(out / "judgements.parquet")
    assert {k: v[0] for k, v in rejects.items()} == {"null-answer": "null_column", "null-raw": "null_column"}, rejects
    assert {r["response_id"] for r in rows} == {"ok"} and report["rows_in"] == 3


# --- quality_control: figure evidence whose element has no image crop to attach -----------------------
def test_quality_control_figure_evidence_without_crop(tmp_path, llm):
    questions = [valid("mcitebench_questions", id=q, question_type="explanation") for q in ("q-text", "q-nocrop")]
    elements = [valid("mcitebench_elements", id="el:p:0:1", modality="text", text="A paragraph."),
                valid("mcitebench_elements", id="el:p:0:2", modality="figure", caption="Figure 1: a plot.")]  # image_sha256 null
    evidence = [valid("mcitebench_evidence", id="e1", question_id="q-text", element_id="el:p:0:1", modality="text"),
                valid("mcitebench_evidence", id="e2", question_id="q-nocrop", element_id="el:p:0:2", modality="figure")]
    out = tmp_path / "out"
    run_stage("quality_control", f"--input=questions={crafted(tmp_path / 'q.parquet', 'mcitebench_questions', questions)}",
              f"--input=evidence={crafted(tmp_path / 'e.parquet', 'mcitebench_evidence', evidence)}",
              f"--input=distractors={crafted(tmp_path / 'd.parquet', 'mcitebench_distractors', [])}",
              f"--input=elements={crafted(tmp_path / 'el.parquet', 'mcitebench_elements', elements)}",
              f"--output=questions={out / 'questions.parquet'}", f"--output=judgements={out / 'judgements.parquet'}",
              f"--output=review_sheet={out / 'review.csv'}", "--params", json.dumps({"llm": llm, "min_score": 0}))
    rejects, report, rows = outcome(out / "questions.parquet")
    assert rejects == {"q-nocrop": ("evidence_without_image", "figure/table evidence without an image crop: ['el:p:0:2']")}, rejects
    assert [r["id"] for r in rows] == ["q-text"]
    assert_counts(report, ("questions",))

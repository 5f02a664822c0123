"""The review page in a real headless browser (Debian's chromium and chromedriver, selenium): three
items decided with the keyboard, a reload shows them kept, the decisions file is the CSV the
release honours, and rebuilding the release drops the rejected item with its note."""
from __future__ import annotations

import csv
import json
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from werkzeug.serving import make_server

from conftest import run_stage
from stages.core.review import read_sheet
from stages.core.review_app import Review, create_app
from stages.mcitebench.quality_control import SHEET_COLUMNS
from tests.test_release_mcitebench import build, release

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver; scripts/install_system_packages.sh)")


def _catalog(tmp_path: Path, el: Path) -> Path:
    """The run's catalog over the built evidence, distractors and elements (the page's images)."""
    run = tmp_path / "runs" / "demo" / "mcitebench"
    files = {"pair_evidence": [tmp_path / "evidence.parquet"], "sample_distractors": [tmp_path / "distractors.parquet"], "parse_pdfs": [Path(el)]}
    args = []
    for stage, paths in files.items():
        (run / stage).mkdir(parents=True)
        for path in paths:
            shutil.copy(path, run / stage / path.name)
            args += ["--input", f"tables={run / stage / path.name}"]
    run_stage("build_catalog", *args, "--output", f"catalog={tmp_path / 'runs/demo/catalog.duckdb'}")
    return tmp_path / "runs/demo/catalog.duckdb"


def _sheet(tmp_path: Path) -> Path:
    """quality_control's sheet layout over the built questions (its judge is not what is tested)."""
    questions = pq.read_table(tmp_path / "sampled.parquet").to_pylist()
    evidence = pq.read_table(tmp_path / "evidence.parquet").to_pylist()
    path = tmp_path / "runs/demo/mcitebench/quality_control/review_sheet.csv"
    path.parent.mkdir(parents=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=SHEET_COLUMNS)
        writer.writeheader()
        for q in questions:
            writer.writerow({"question_id": q["id"], "question_type": q["question_type"], "paper_id": q["paper_id"], "question": q["question"],
                             "answer": q["answer"], "evidence": "\n".join(f"[{e['key']}] ({e['modality']})" for e in evidence if e["question_id"] == q["id"]),
                             "relevance": 5, "clarity": 5, "evidence_alignment": 5, "judge_reason": "fine", "decision": "", "note": ""})
    return path


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def page(tmp_path):
    """The app on a free port of 127.0.0.1, served from a thread."""
    store, el, qas = build(tmp_path)
    review = Review(_sheet(tmp_path), tmp_path / "review" / "review_sheet.csv", _catalog(tmp_path, el), store.root)
    server = make_server("127.0.0.1", 0, create_app(review), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", review, store, el
    server.shutdown()
    thread.join(timeout=10)


def _press(browser, key: str):
    from selenium.webdriver.common.action_chains import ActionChains

    old = browser.find_element("tag name", "html")
    ActionChains(browser).send_keys(key).perform()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(lambda d: old.id != d.find_element("tag name", "html").id)  # the next page loaded


def test_keyboard_review_is_kept_and_honoured_by_the_release(browser, page, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    base, review, store, el = page
    items = review.rows()
    browser.get(base + "/")
    assert "item 1 of 4" in browser.find_element("id", "progress").text
    assert browser.find_elements("css selector", ".images img"), "the evidence crops are shown"
    _press(browser, "k")  # item 1 kept
    assert "item 2 of 4" in browser.find_element("id", "progress").text
    ActionChains(browser).send_keys("e").perform()  # a note for item 2, typed, then leave the field
    ActionChains(browser).send_keys("evidence does not answer it").send_keys(Keys.ESCAPE).perform()
    _press(browser, "r")  # item 2 rejected with the note
    _press(browser, "k")  # item 3 kept
    assert "item 4 of 4" in browser.find_element("id", "progress").text and "3 decided" in browser.find_element("id", "done").text

    browser.get(base + "/item/1")  # a reload shows the decision kept, with the note
    assert "reject" in browser.find_element("id", "status").text
    assert browser.find_element("id", "note").get_attribute("value") == "evidence does not answer it"
    browser.get(base + "/")  # resuming goes to the first undecided item
    assert "item 4 of 4" in browser.find_element("id", "progress").text
    browser.save_screenshot(str(tmp_path / "review_page.png"))
    assert (tmp_path / "review_page.png").stat().st_size > 0

    decisions = {r["question_id"]: (r["decision"], r["note"]) for r in read_sheet(tmp_path / "review/review_sheet.csv", "question_id", ["decision"])}
    ids = [r["question_id"] for r in items]
    assert decisions == {ids[0]: ("keep", ""), ids[1]: ("reject", "evidence does not answer it"), ids[2]: ("keep", ""), ids[3]: ("", "")}

    manifest, _ = release(tmp_path, store, el, "--input", f"review={tmp_path / 'review/review_sheet.csv'}")
    released = {json.loads(line)["question_id"] for line in (Path(manifest["path"]) / "mcitebench.jsonl").read_text().splitlines()}
    assert released == {ids[0], ids[2], ids[3]}
    rejects = pq.read_table(tmp_path / "out" / "release.json.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"], r["detail"]) for r in rejects] == [(ids[1], "human_rejected", "evidence does not answer it")]


def test_pairing_sheet_decisions_are_what_pair_evidence_reads(tmp_path):
    """The other kind of sheet through the same app: reject writes `none`, keep writes the typed
    element ids, and pair_evidence's reader takes them as the reviewer's pairs."""
    from stages.mcitebench.pair_evidence import read_pairing_review

    build(tmp_path)
    review = Review(tmp_path / "pairing_sheet.csv", tmp_path / "pairing_reviewed.csv", None, tmp_path / "images")
    client = create_app(review).test_client()
    rows = review.rows()
    assert client.post("/item/0", data={"decision": "reject", "note": "wrong table"}).status_code == 302
    typed = rows[1]["proposed"] or rows[0]["proposed"]
    assert client.post("/item/1", data={"decision": "keep", "value": typed}).status_code == 302
    assert "keep needs a value" in client.post("/item/2", data={"decision": "keep", "value": " "}).get_data(as_text=True)
    assert read_pairing_review(str(tmp_path / "pairing_reviewed.csv")) == {
        (rows[0]["question_id"], rows[0]["reference"]): [], (rows[1]["question_id"], rows[1]["reference"]): typed.split()}

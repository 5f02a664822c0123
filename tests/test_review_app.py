"""The review page as a user runs it: started with the README's own commands from a repository root
(relative paths, the image store at its default data/cache/images), driven in a real headless
browser (Debian's chromium and chromedriver, selenium). Every sheet kind is opened and photographed
(quality control, evidence pairing, MAVIS fact annotation): tables drawn as tables, each crop inside
its evidence or distractor entry, evidence and distractors marked apart, every image served. Three
QC items are decided with the keyboard, the release honours the decisions; the MAVIS sheet is
decided per document and release_mavis honours it. The test client covers the page's defences:
the per-session token, the Origin and Host allow-list, and a clear page for a decisions file it
cannot read. Screenshots land in the test's folder (and in $REVIEW_SCREENSHOTS when set)."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import REPO, run_stage
from stages.core.images import ImageStore
from stages.core.review import read_sheet
from stages.core.review_app import Review, create_app, table_markup
from stages.core.tables import write_table
from stages.mavis.release_mavis import read_annotations
from stages.mcitebench.quality_control import SHEET_COLUMNS
from tests.test_release_mcitebench import build, release
from tests.test_sample_annotation import _release as release_mavis, _world as mavis_world

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver "
                                   "(apt-get install chromium chromium-driver; scripts/install_system_packages.sh)")
# MinerU writes a table element's text as HTML; one of the demo paper's tables is given such a body,
# with markup that must never reach the page (a script, an event handler)
TABLE_HTML = ('<table><tr><th>Model</th><th colspan="2">W-100</th></tr><tr><td>Ours</td><td>91.2</td><td onclick="x()">±0.3</td></tr>'
              '<tr><td>Baseline<script>alert(1)</script></td><td>87.1</td><td><img src=x onerror=alert(2)>±0.4</td></tr></table>')


def readme_commands() -> list[str]:
    """The review page commands of the README, as a user copies them (comments dropped)."""
    block = re.search(r"\*\*The review page\.\*\*.*?```bash\n(.+?)\n```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def command_for(sheet: str) -> list[str]:
    [line] = [c for c in readme_commands() if c.endswith(sheet)]
    words = line.split()
    assert words[:3] == ["python", "-m", "stages.core.review_app"], line
    return [sys.executable, *words[1:]]


class Page:
    """`python -m stages.core.review_app <sheet>` started in `root` (a free port added), stopped after."""

    def __init__(self, root: Path, sheet: str):
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # the checkout's code; every path the command names is root's
        self.process = subprocess.Popen([*command_for(sheet), "--port", "0"], cwd=root, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.banner = self.process.stdout.readline()
        found = re.search(r"open (http://127\.0\.0\.1:\d+)/", self.banner)
        if not found:
            self.process.kill()
            raise AssertionError(f"the page did not start: {self.banner}{self.process.stdout.read()}")
        self.url = found.group(1)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=20)


def _site(tmp_path: Path) -> Path:
    """A repository root as the demo leaves it: the MCiteBench run folder with its two sheets, the
    catalog, the image store at data/cache/images; MAVIS's annotation sheet beside them."""
    root = tmp_path / "root"
    store, el, _ = build(tmp_path)
    elements = pq.read_table(el).to_pylist()
    for e in elements:
        if e["label"] == "Table 2":
            e["text"] = TABLE_HTML
    write_table(el, elements, "mcitebench_elements")
    run = root / "data/runs/demo"
    files = {"pair_evidence": [tmp_path / "evidence.parquet"], "sample_distractors": [tmp_path / "distractors.parquet"], "parse_pdfs": [Path(el)]}
    tables = []
    for stage, paths in files.items():
        (run / "mcitebench" / stage).mkdir(parents=True)
        for path in paths:
            tables.append(shutil.copy(path, run / "mcitebench" / stage / Path(path).name))
    shutil.copy(tmp_path / "pairing_sheet.csv", run / "mcitebench/pair_evidence/pairing_sheet.csv")
    _qc_sheet(tmp_path, run / "mcitebench/quality_control/review_sheet.csv")
    tables += _mavis(tmp_path / "mavis", run)
    run_stage("build_catalog", *[a for t in tables for a in ("--input", f"tables={t}")], "--output", f"catalog={run / 'catalog.duckdb'}")
    shutil.copytree(store.root, root / "data/cache/images")
    shutil.copytree(tmp_path / "mavis" / "store", root / "data/cache/images", dirs_exist_ok=True)
    return root


def _qc_sheet(tmp_path: Path, path: Path) -> None:
    """quality_control's sheet layout over the built questions (its judge is not what is tested)."""
    questions = pq.read_table(tmp_path / "sampled.parquet").to_pylist()
    evidence = pq.read_table(tmp_path / "evidence.parquet").to_pylist()
    path.parent.mkdir(parents=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=SHEET_COLUMNS)
        writer.writeheader()
        for q in questions:
            writer.writerow({"question_id": q["id"], "question_type": q["question_type"], "paper_id": q["paper_id"], "question": q["question"],
                             "answer": q["answer"], "options": " | ".join(f"{k}. {o}" for k, o in zip("ABCD", q["options"])),
                             "gold": q["gold"] or "",
                             "evidence": "\n".join(f"[{e['key']}] ({e['modality']}) ..." for e in evidence if e["question_id"] == q["id"]),
                             "relevance": 2, "clarity": 2, "evidence_alignment": 1, "judge_reason": "fine", "decision": "", "note": ""})


def _mavis(work: Path, run: Path) -> list[Path]:
    """The real sample_annotation over test_sample_annotation's world; its tables in the run layout."""
    work.mkdir()
    paths, _, _ = mavis_world(work)
    sheet = run / "mavis/sample_annotation/annotation_sheet.csv"
    sheet.parent.mkdir(parents=True)
    run_stage("sample_annotation", *[f"--input={k}={paths[k]}" for k in ("instances", "facts", "judged", "documents")],
              f"--output=sample={sheet.parent / 'sample.parquet'}", f"--output=sheet={sheet}",
              "--params", json.dumps({"size": 3, "min_supported_facts": 0, "both_modalities": False, "docs_per_fact": 3}))
    layout = {"instances": "filter_questions/instances.00000.parquet", "question_images": "phash_dedup/images_deduped.00000.parquet",
              "document_images": "fact_phash_dedup/images_deduped.00000.parquet"}
    out = []
    for name, where in layout.items():
        (run / "mavis" / where).parent.mkdir(parents=True, exist_ok=True)
        out.append(Path(shutil.copy(paths[name], run / "mavis" / where)))
    (work / "paths.json").write_text(json.dumps({k: str(v) for k, v in paths.items()}))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(the repository root, the folder the MCiteBench build used: its stage outputs and store)."""
    base = tmp_path_factory.mktemp("review")
    return _site(base), base


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def fresh(built, tmp_path):
    """A copy of the repository root per test: each starts with no decisions file."""
    root = tmp_path / "root"
    shutil.copytree(built[0], root)
    return root


def _press(browser, key: str):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    old = browser.find_element("tag name", "html")
    ActionChains(browser).send_keys(key).perform()
    WebDriverWait(browser, 10).until(lambda d: old.id != d.find_element("tag name", "html").id)  # the next page loaded


def _shot(browser, tmp_path: Path, name: str) -> Path:
    """A screenshot of the whole page, beyond the window (Chrome DevTools)."""
    import base64

    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                              "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    path = tmp_path / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    if os.environ.get("REVIEW_SCREENSHOTS"):
        Path(os.environ["REVIEW_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(os.environ["REVIEW_SCREENSHOTS"]) / path.name)
    return path


def _images_load(browser) -> list[str]:
    """The src of every image on the page that the browser could not show (HTTP error or not an image)."""
    return browser.execute_script("return [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")


def _go(browser, url: str, item: int):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{url}/item/{item}")
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return [...document.images].every(i => i.complete)"))


@needs_browser
def test_quality_control_page_as_the_readme_starts_it(browser, fresh, tmp_path):
    page = Page(fresh, "quality_control/review_sheet.csv")
    try:
        review = Review(fresh / "data/runs/demo/mcitebench/quality_control/review_sheet.csv", fresh / "review/review_sheet.csv",
                        fresh / "data/runs/demo/catalog.duckdb", fresh / "data/cache/images")
        items = review.rows()
        shots = {}
        for i, row in enumerate(items):
            _go(browser, page.url, i)
            assert _images_load(browser) == [], f"item {i}: images not served"
            entries = browser.find_elements("css selector", ".entry")
            roles = [e.get_attribute("data-role") for e in entries]
            assert roles and roles[0] == "evidence" and set(roles) <= {"evidence", "distractor"}
            assert roles == sorted(roles, key=lambda r: r != "evidence"), "the gold evidence comes first, then the distractors"
            for entry in entries:  # each crop inside its own entry, beside its text
                badge = entry.find_element("css selector", ".badge").text
                assert badge == entry.get_attribute("data-role").upper()
                modality = entry.find_element("css selector", ".modality").text
                if modality in ("figure", "table"):
                    assert entry.find_elements("css selector", ".crop img"), f"item {i}: a {modality} without its crop"
            body = browser.find_element("tag name", "body").text
            assert "<table" not in body and "<tr>" not in body, "table markup shown raw"
            if any("Table 2" in e.text for e in entries):
                table = browser.find_element("css selector", ".entry .table table")
                cells = [c.text for c in table.find_elements("css selector", "th, td")]
                assert cells[:3] == ["Model", "W-100", "Ours"] and "±0.4" in cells
                assert table.find_element("css selector", "th[colspan='2']")
                assert not browser.find_elements("css selector", ".entry script, .entry [onclick], .entry img[onerror]")
                shots["table"] = _shot(browser, tmp_path, "quality_control_table")
            elif any(e.find_elements("css selector", ".crop img") for e in entries) and "figure" not in shots:
                shots["figure"] = _shot(browser, tmp_path, "quality_control_figure")
        assert {"table", "figure"} <= set(shots)

        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        browser.get(page.url + "/")
        assert "item 1 of 4" in browser.find_element("id", "progress").text
        _press(browser, "k")  # item 1 kept
        ActionChains(browser).send_keys("e").perform()  # a note for item 2, typed, then leave the field
        ActionChains(browser).send_keys("evidence does not answer it").send_keys(Keys.ESCAPE).perform()
        _press(browser, "r")  # item 2 rejected with the note
        _press(browser, "k")  # item 3 kept
        assert "item 4 of 4" in browser.find_element("id", "progress").text and "3 decided" in browser.find_element("id", "done").text
        browser.get(page.url + "/item/1")  # a reload shows the decision kept, with the note
        assert "reject" in browser.find_element("id", "status").text
        assert browser.find_element("id", "note").get_attribute("value") == "evidence does not answer it"
        browser.get(page.url + "/")  # resuming goes to the first undecided item
        assert "item 4 of 4" in browser.find_element("id", "progress").text
    finally:
        page.stop()
    decided = fresh / "review/review_sheet.csv"  # the README's default decisions file, relative to where the page started
    decisions = {r["question_id"]: (r["decision"], r["note"]) for r in read_sheet(decided, "question_id", ["decision"])}
    ids = [r["question_id"] for r in items]
    assert decisions == {ids[0]: ("keep", ""), ids[1]: ("reject", "evidence does not answer it"), ids[2]: ("keep", ""), ids[3]: ("", "")}


def test_quality_control_decisions_are_honoured_by_the_release(built, fresh):
    """What the page writes is what release_mcitebench reads (config mcitebench.review_sheet)."""
    base = built[1]
    review = Review(fresh / "data/runs/demo/mcitebench/quality_control/review_sheet.csv", fresh / "review/review_sheet.csv",
                    fresh / "data/runs/demo/catalog.duckdb", fresh / "data/cache/images")
    client, csrf = _client(review)
    ids = [r["question_id"] for r in review.rows()]
    assert client.post("/item/1", data={"decision": "reject", "note": "evidence does not answer it", "csrf": csrf}).status_code == 302
    manifest, _ = release(base, ImageStore(base / "images"), str(base / "elements.parquet"), "--input", f"review={review.decisions}")
    released = {json.loads(line)["question_id"] for line in (Path(manifest["path"]) / "mcitebench.jsonl").read_text().splitlines()}
    assert released == set(ids) - {ids[1]}
    rejects = pq.read_table(base / "out" / "release.json.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"], r["detail"]) for r in rejects] == [(ids[1], "human_rejected", "evidence does not answer it")]


@needs_browser
def test_pairing_page_as_the_readme_starts_it(browser, fresh, tmp_path):
    """The parser's proposed elements for each reference, with their crops; keep writes the typed
    element ids, reject `none`, and pair_evidence's reader takes them as the reviewer's pairs."""
    from stages.mcitebench.pair_evidence import read_pairing_review

    page = Page(fresh, "pair_evidence/pairing_sheet.csv")
    try:
        review = Review(fresh / "data/runs/demo/mcitebench/pair_evidence/pairing_sheet.csv", fresh / "review/pairing_sheet.csv",
                        fresh / "data/runs/demo/catalog.duckdb", fresh / "data/cache/images")
        rows = review.rows()
        photographed = False
        for i, row in enumerate(rows):
            _go(browser, page.url, i)
            assert _images_load(browser) == []
            entries = browser.find_elements("css selector", ".entry")
            assert [e.get_attribute("data-role") for e in entries] == ["proposed"] * len(row["proposed"].split())
            if any(e.find_elements("css selector", ".crop img") for e in entries) and not photographed:
                _shot(browser, tmp_path, "pairing")
                photographed = True
        assert photographed
        _go(browser, page.url, 0)
        _press(browser, "r")  # the first reference dropped
        typed = rows[1]["proposed"]
        assert browser.find_element("id", "value").get_attribute("value") == typed  # prefilled with the proposal
        _press(browser, "k")
    finally:
        page.stop()
    assert read_pairing_review(str(fresh / "review/pairing_sheet.csv")) == {
        (rows[0]["question_id"], rows[0]["reference"]): [], (rows[1]["question_id"], rows[1]["reference"]): typed.split()}


@needs_browser
def test_annotation_page_as_the_readme_starts_it(browser, fresh, built, tmp_path):
    """MAVIS's fact sheet: the post's image, the fact, each shown document (a passage, or a web image
    with its picture) with its own grounded yes / no; keys 1-3 set them, k keeps (relevant yes), r
    rejects (relevant no); release_mavis honours the file (the decided instance is the test split)."""
    page = Page(fresh, "sample_annotation/annotation_sheet.csv")
    sheet = fresh / "data/runs/demo/mavis/sample_annotation/annotation_sheet.csv"
    rows = list(csv.DictReader(open(sheet, newline="")))
    try:
        image_row = next(i for i, r in enumerate(rows) if "image" in (r.get("doc_1_modality"), r.get("doc_2_modality")))
        _go(browser, page.url, image_row)
        assert _images_load(browser) == []
        assert browser.find_elements("css selector", "#question-images img"), "the post's image is shown"
        docs = browser.find_elements("css selector", ".entry.role-document")
        shown = [k for k in (1, 2, 3) if rows[image_row].get(f"doc_{k}")]
        assert len(docs) == len(shown)
        for doc, k in zip(docs, shown):
            assert doc.find_elements("css selector", f"input[name=grounded_{k}]")
            if rows[image_row][f"doc_{k}_modality"] == "image":
                assert doc.find_elements("css selector", ".crop img"), "an image document without its picture"
        _shot(browser, tmp_path, "annotation")
        _press(browser, "k")  # keep with a document undecided: refused, naming it
        assert "grounded_1" in browser.find_element("id", "error").text
        from selenium.webdriver.common.action_chains import ActionChains

        for k in shown:
            ActionChains(browser).send_keys(str(k)).perform()  # yes
        if len(shown) > 1:
            ActionChains(browser).send_keys(str(shown[-1])).perform()  # the last one toggled to no
        _press(browser, "k")
        _go(browser, page.url, image_row)
        assert "keep" in browser.find_element("id", "status").text
    finally:
        page.stop()
    decided = fresh / "review/annotation_sheet.csv"
    notes = read_annotations(str(decided), 3)
    fact = rows[image_row]["fact_id"]
    assert notes["facts"][fact]["relevant"] is True
    assert notes["facts"][fact]["grounded"] == {rows[image_row][f"doc_{k}"]: (k != shown[-1] or len(shown) == 1) for k in shown}
    paths = {k: Path(v) for k, v in json.loads((built[1] / "mavis" / "paths.json").read_text()).items()}
    same = [r for r in rows if r["instance_id"] == rows[image_row]["instance_id"]]
    result, manifest = release_mavis(tmp_path, paths, ImageStore(fresh / "data/cache/images"), decided)
    test_split = {r["id"] for r in pq.read_table(Path(manifest["path"]) / "parquet/instances.parquet").to_pylist() if r["split"] == "test"}
    assert test_split == ({rows[image_row]["instance_id"]} if len(same) == 1 else set())


# ----------------------------------------------------------------------------- the page's defences
def _client(review: Review):
    """A test client that has opened the page once (its session holds the token); the token."""
    client = create_app(review).test_client()
    page = client.get("/item/0").get_data(as_text=True)
    return client, re.search(r'name="csrf" value="([^"]+)"', page).group(1)


@pytest.fixture
def qc(fresh) -> Review:
    return Review(fresh / "data/runs/demo/mcitebench/quality_control/review_sheet.csv", fresh / "review/review_sheet.csv",
                  fresh / "data/runs/demo/catalog.duckdb", fresh / "data/cache/images")


def test_a_decision_needs_the_session_token_and_a_local_origin(qc):
    client, csrf = _client(qc)
    refused = [
        client.post("/item/0", data={"decision": "keep"}),  # no token: a form posted from elsewhere
        client.post("/item/0", data={"decision": "keep", "csrf": "guessed"}),
        client.post("/item/0", data={"decision": "keep", "csrf": csrf}, headers={"Origin": "http://evil.example"}),
        client.post("/item/0", data={"decision": "keep", "csrf": csrf}, headers={"Referer": "http://evil.example/page"}),
        create_app(qc).test_client().post("/item/0", data={"decision": "keep", "csrf": csrf}),  # another session's token
    ]
    assert [r.status_code for r in refused] == [403] * 5
    assert "Decision refused" in refused[2].get_data(as_text=True) and not qc.decisions.exists()  # nothing written
    ok = client.post("/item/0", data={"decision": "keep", "csrf": csrf}, headers={"Origin": "http://127.0.0.1:5000"})
    assert ok.status_code == 302 and qc.rows()[0]["decision"] == "keep"
    assert client.post("/item/1", data={"decision": "reject", "csrf": csrf}, headers={"Origin": "http://localhost:5000"}).status_code == 302


def test_two_pages_open_at_once_keep_their_sessions(qc, fresh):
    """Cookies ignore ports: a second review page open in the same browser (another sheet on another
    port) must not end the first one's session."""
    pairing = Review(fresh / "data/runs/demo/mcitebench/pair_evidence/pairing_sheet.csv", fresh / "review/pairing_sheet.csv", None,
                     fresh / "data/cache/images")
    first, csrf = _client(qc)
    second = create_app(pairing).test_client()
    second.get("/item/0")
    name = second.application.config["SESSION_COOKIE_NAME"]
    first.set_cookie(name, second.get_cookie(name).value)  # one cookie jar: the second page's cookie lands beside the first's
    assert first.post("/item/0", data={"decision": "keep", "csrf": csrf}).status_code == 302


def test_only_local_host_names_are_answered(qc):
    """DNS rebinding: a foreign name resolving to 127.0.0.1 gets no page; --allow-host adds one."""
    client = create_app(qc).test_client()
    assert client.get("/item/0", headers={"Host": "127.0.0.1:5000"}).status_code == 200
    assert client.get("/item/0", headers={"Host": "localhost:5000"}).status_code == 200
    rebound = client.get("/item/0", headers={"Host": "attacker.example:5000"})
    assert rebound.status_code == 403 and "Host not allowed" in rebound.get_data(as_text=True)
    assert qc.rows()[0]["question"] not in rebound.get_data(as_text=True)
    tunnel = create_app(qc, ("127.0.0.1", "localhost", "review.lab")).test_client()
    assert tunnel.get("/item/0", headers={"Host": "review.lab"}).status_code == 200


@pytest.mark.parametrize("content, says", [
    ("question_id,decision,note\nq,keep,caf\xe9 au lait\n".encode("latin-1"), "not UTF-8"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8"),  # a binary file saved under the name
    ("question_id,decision,note\nq,keep,a\x00b\n", "binary data, not a CSV sheet"),  # review.read_csv's reasons
    ("id,verdict\nq,keep\n", "lacks the columns"),
])
def test_an_unreadable_decisions_file_is_a_clear_page_and_is_not_overwritten(qc, content, says):
    qc.decisions.parent.mkdir(parents=True, exist_ok=True)
    qc.decisions.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = qc.decisions.read_bytes()
    client = create_app(qc).test_client()
    for response in (client.get("/item/0"), client.get("/"), client.post("/item/0", data={"decision": "keep"})):
        text = response.get_data(as_text=True)
        assert response.status_code in (403, 422) and "Traceback" not in text
    page = client.get("/item/0")
    assert page.status_code == 422 and says in page.get_data(as_text=True) and str(qc.decisions) in page.get_data(as_text=True)
    assert qc.decisions.read_bytes() == before


def test_two_rows_deciding_one_item_differently_are_named(qc):
    ids = [r["question_id"] for r in qc.rows()]
    qc.decisions.parent.mkdir(parents=True, exist_ok=True)
    qc.decisions.write_text(f"question_id,decision,note\n{ids[0]},keep,\n{ids[0]},reject,\n")
    page = create_app(qc).test_client().get("/item/0")
    assert page.status_code == 422 and "lines 2 and 3" in page.get_data(as_text=True)


def test_table_markup_keeps_tables_and_drops_everything_else():
    html = str(table_markup(TABLE_HTML))
    assert html.startswith("<table><tr><th>Model</th><th colspan=\"2\">W-100</th>")
    assert "script" not in html and "alert" not in html and "onclick" not in html and "<img" not in html
    assert str(table_markup("| a | b |\n|---|---|\n| <b>1</b> | 2 |")).count("<td>") == 2  # a markdown table, raw HTML escaped
    assert "&lt;b&gt;" in str(table_markup("| a | b |\n|---|---|\n| <b>1</b> | 2 |"))
    assert table_markup("Table 2: Main results.") is None


def test_without_a_catalog_the_sheet_itself_gives_the_entries(fresh):
    """A sheet opened away from its run (no catalog): evidence and distractors still apart, read from
    the sheet's own columns ("[key] (modality) content" lines, as quality_control writes them)."""
    sheet = fresh / "data/runs/demo/mcitebench/quality_control/review_sheet.csv"
    rows = list(csv.DictReader(open(sheet, newline="")))
    rows[0]["evidence"] = "[Table 2] (table) Table 2: Main results.\n" + TABLE_HTML + "\n[Section 4.2, Line 39] (text) The gate helps."
    rows[0]["distractors"] = "[Figure 3] (figure) Figure 3: Training curves."
    with open(sheet, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    review = Review(sheet, fresh / "review/review_sheet.csv", None, fresh / "data/cache/images")
    entries = review.entries(review.rows()[0])
    assert [(e["role"], e["title"], e["modality"]) for e in entries] == [
        ("evidence", "Table 2", "table"), ("evidence", "Section 4.2, Line 39", "text"), ("distractor", "Figure 3", "figure")]
    assert "<td>91.2</td>" in str(entries[0]["table"]) and entries[1]["text"] == "The gate helps."


def test_what_the_page_and_the_report_write_stays_out_of_git():
    """The review page's decisions (review/, where the README's command writes them) and Snakemake's
    report.html, both in the repository root, are git-ignored: a user's `git status` stays clean
    (issue 33 item 8)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["review/review_sheet.csv", "review/annotation_sheet.csv", "report.html"]
    result = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, capture_output=True, text=True)
    assert result.stdout.split() == paths, result.stdout + result.stderr

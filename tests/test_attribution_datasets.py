"""attribution_inputs on the seed's datasets (cite-while-you-generate.txt §4.1, Table 1, App. B),
through the stage's CLI on small folders written in each documented layout: CliConSummation
dialogue sheets (blocks of a header, a "Dialogue ID" row, turns, a diagnosis label row; images as
$file$ under Visuals/) and MIMIC-CXR reports (files/p<NN>/p<subject>/s<study>.txt) with App. B's
single-report, section and sentence-count filter. Every dialogue or report is a row or a reject."""
from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
from PIL import Image

from conftest import run_stage

HEADER = ["Patient", "Doctor", "Symptom", "Visual", "Severity", "Intent", "Summary", "MCS", "DI"]


def _block(dialogue_id, turns, summary="The patient reports ear pain.", label="Disease: Otitis, Group: 7"):
    rows = [HEADER, ["Dialogue ID", dialogue_id] + [""] * 7]
    for i, (patient, doctor, visual, severity) in enumerate(turns):
        rows.append([patient, doctor, "O O", visual, severity, "", summary if i == 0 else "", "", ""])
    return rows + [[label] + [""] * 8, [""] * 9]


def _run(tmp_path, name, folder, **params):
    out = tmp_path / f"{name}.parquet"
    run_stage("attribution_inputs", "--input", f"{name}={folder}", "--output", f"source_items={out}", "--params", json.dumps(params))
    rejects = {r["id"]: r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    return pq.read_table(out).to_pylist(), rejects, json.loads(open(f"{out}.report.json").read())


def test_cliconsummation_sheets(tmp_path):
    folder = tmp_path / "clicon"
    (folder / "Visuals").mkdir(parents=True)
    Image.new("RGB", (16, 16), "red").save(folder / "Visuals" / "S1_1_1.jpg")
    sheet = [
        *_block("101", [("Hi doctor, my ear hurts.", "Do you have diminished hearing?", "", ""),
                        ("Yes.\nPlease see $S1_1_1.jpg$.", "I see slight redness. Any dizziness?", "Redness in ear", "Mild"),
                        ("Sometimes.", "This points to otitis.", "", "")]),
        *_block("102", [("I have had a fever for two days.", "Any rash?", "", ""), ("No rash.", "You likely have a viral infection.", "", "")]),
        *_block("103", [("See $S1_1_1.jpg$ and $S2.jpg$.", "Two photos, thank you.", "Skin rash", "Severe")]),
        *_block("104", [("Look at $S9_9_9.jpg$.", "I see it.", "Lip swelling", "Severe")]),
        *_block("105", [("My knee hurts.", "Since when?", "", "")]),  # a second text-only dialogue: over the quota of 1
        HEADER, ["My cough is bad.", "Since when?", "", "", "", "", "", "", ""],  # a block without its Dialogue ID row
    ]
    with open(folder / "dialogues.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(sheet)
    rows, rejects, report = _run(tmp_path, "cliconsummation", folder, cliconsummation_text_only=1)
    assert [r["id"] for r in rows] == ["cliconsummation:101", "cliconsummation:102"]
    mm, text = rows
    assert mm["sentences"] == ["Patient: Hi doctor, my ear hurts.", "Doctor: Do you have diminished hearing?", "Patient: Yes.",
                               "Please see.", "Doctor: I see slight redness.", "Any dizziness?", "Patient: Sometimes.",
                               "Doctor: This points to otitis."]
    assert "Please see.\n<image>\nDoctor: I see" in mm["source"] and "Disease" not in mm["source"]  # the label row is no utterance
    assert mm["image"].endswith("Visuals/S1_1_1.jpg") and mm["image_position"] == 4  # after the utterance that shows it
    assert mm["image_description"] == "Redness in ear, mild" and mm["reference_summary"] == "The patient reports ear pain."
    assert text["image"] is None and text["image_position"] is None and len(text["sentences"]) == 4
    assert rejects == {"cliconsummation:dialogues.csv:14": "several_images", "cliconsummation:dialogues.csv:19": "image_missing",
                       "cliconsummation:dialogues.csv:24": "over_quota", "cliconsummation:dialogues.csv:29": "bad_block"}
    assert report["rows_in"] == 6 == len(rows) + report["rejected"]


FINDINGS = ("PA and lateral views of the chest were obtained. The lungs are clear. There is no focal consolidation.\n"
            " There is no pleural effusion. There is no pneumothorax. The heart size is normal. The mediastinal contours\n"
            " are normal. The hila are normal. Osseous structures are intact. No free air is seen.")
IMPRESSION = "No acute process. Lungs are clear. Heart is normal. No effusion. No fracture."


def _report(folder, subject, study, findings=FINDINGS, impression=IMPRESSION):
    path = folder / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = f"                                 FINAL REPORT\n EXAMINATION:  CHEST (PA AND LAT)\n\n INDICATION:  Cough.\n\n"
    if findings is not None:
        body += f" FINDINGS:\n \n {findings}\n \n"
    if impression is not None:
        body += f" IMPRESSION:\n \n {impression}\n"
    path.write_text(body)
    return path


def test_mimic_cxr_reports_through_appendix_b(tmp_path):
    folder = tmp_path / "mimic"
    kept = _report(folder, "10000001", "50000001")
    _report(folder, "10000002", "50000002")
    _report(folder, "10000002", "50000003")  # a second report of the same patient: both out (step 1)
    _report(folder, "10000004", "50000004", impression=None)  # step 2
    _report(folder, "10000005", "50000005", findings="The lungs are clear. The heart is normal.")  # step 3: 2 sentences
    _report(folder, "10000006", "50000006", impression="No acute process. Lungs are clear. Heart is normal. No effusion.")  # 4
    rows, rejects, report = _run(tmp_path, "mimic_cxr", folder)
    [row] = rows
    assert row["id"] == "mimic-cxr:s50000001" and len(row["sentences"]) == 10 and row["reference_summary"] == IMPRESSION
    assert row["sentences"][6] == "The mediastinal contours are normal."  # wrapped lines joined
    assert row["image"] is None
    assert rejects == {"mimic-cxr:p10000002/s50000002": "several_reports", "mimic-cxr:p10000002/s50000003": "several_reports",
                       "mimic-cxr:p10000004/s50000004": "missing_section", "mimic-cxr:p10000005/s50000005": "too_few_sentences",
                       "mimic-cxr:p10000006/s50000006": "too_few_sentences"}
    assert report["rows_in"] == 6 == len(rows) + report["rejected"]

    # report/image pairs (mimic-cxr-jpg): the study's first image, after the findings
    study = kept.with_suffix("")
    study.mkdir()
    for name in ("b-view.jpg", "a-view.jpg"):
        Image.new("L", (16, 16), 128).save(study / name)
    rows, rejects, _ = _run(tmp_path, "mimic_cxr", folder, mimic_images=True, mimic_min_impression_sentences=4)
    by_id = {r["id"]: r for r in rows}
    assert by_id["mimic-cxr:s50000001"]["image"].endswith("a-view.jpg") and by_id["mimic-cxr:s50000001"]["image_position"] == 10
    assert rejects["mimic-cxr:p10000006/s50000006"] == "image_missing"  # 4 impression sentences pass now; no image


def test_rule_reads_the_dataset_folders_named_in_the_config(workflow_copy, tmp_path):
    """attribution.cliconsummation / attribution.mimic_cxr (no JSONL) reach attribution_inputs through
    its rule, with the attribution_inputs subsection as params; a section naming no source at all is
    refused before any job runs."""
    import yaml

    from conftest import demo_config, run_snakemake

    clicon = tmp_path / "clicon"
    (clicon / "Visuals").mkdir(parents=True)
    with open(clicon / "d.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(_block("7", [("My ear hurts.", "Since when?", "", "")]) + _block("8", [("A cough.", "How long?", "", "")]))
    mimic = tmp_path / "mimic"
    _report(mimic, "10000001", "50000001")
    config = demo_config()
    for family in ("mavis", "mcitebench", "m2rag", "eval_mcitebench", "eval_mavis", "eval_m2rag", "citeeval", "retrieval", "images"):
        config[family]["enabled"] = False
    config["attribution"].update(items=None, cliconsummation=str(clicon), mimic_cxr=str(mimic),
                                 attribution_inputs={"cliconsummation_text_only": 1})
    (workflow_copy / "config" / "test.yaml").write_text(yaml.safe_dump(config))
    target = "data/runs/demo/attribution/attribution_inputs/items.parquet"
    run_snakemake(workflow_copy, target, "--configfile", "config/test.yaml")
    rows = pq.read_table(workflow_copy / target).to_pylist()
    assert [r["id"] for r in rows] == ["cliconsummation:7", "mimic-cxr:s50000001"]
    assert [r["reason"] for r in pq.read_table(workflow_copy / f"{target}.rejects.parquet").to_pylist()] == ["over_quota"]

    config["attribution"].update(cliconsummation=None, mimic_cxr=None)
    (workflow_copy / "config" / "test.yaml").write_text(yaml.safe_dump(config))
    refused = run_snakemake(workflow_copy, target, "--configfile", "config/test.yaml", "-n", check=False)
    assert refused.returncode != 0 and "attribution: name the items to summarise" in refused.stdout + refused.stderr


def test_cliconsummation_sheet_faults(tmp_path):
    """A sheet saved with a BOM and CRLF line ends is read; an unquoted label row ("Disease: X,
    Group: 1", two cells) is no utterance; an image named outside Visuals/ is image_missing even
    where the file is there."""
    folder = tmp_path / "clicon"
    (folder / "Visuals").mkdir(parents=True)
    Image.new("RGB", (8, 8), "red").save(folder / "escaped.jpg")
    header = ",".join(HEADER)
    sheet = (f"\ufeff{header}\nDialogue ID,7\nI have a rash.,How long?,O,,,,Patient has a rash.,,\nTwo days.,Ok.\n"
             f"Disease: Eczema, Group: 1\n{header}\nDialogue ID,8\nSee $../escaped.jpg$.,I see.,O,Rash,Mild,,,,\n")
    (folder / "dialogues.csv").write_bytes(sheet.replace("\n", "\r\n").encode())
    rows, rejects, report = _run(tmp_path, "cliconsummation", folder)
    [row] = rows
    assert row["source"] == "Patient: I have a rash.\nDoctor: How long?\nPatient: Two days.\nDoctor: Ok."
    assert rejects == {"cliconsummation:dialogues.csv:6": "image_missing"} and report["rows_in"] == 2


def _fails(tmp_path, name, folder):
    result = run_stage("attribution_inputs", "--input", f"{name}={folder}", "--output", f"source_items={tmp_path / 'o.parquet'}",
                       check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    return result.stderr.strip().splitlines()[-1]


def test_a_sheet_with_an_unclosed_quote_is_an_error_naming_it(tmp_path):
    """An unclosed quote would swallow the rest of the sheet into one cell, kept as a dialogue."""
    folder = tmp_path / "clicon"
    folder.mkdir()
    (folder / "dialogues.csv").write_text(f"{','.join(HEADER)}\nDialogue ID,7\n\"I have a rash,Ok\nTwo days.,Ok.\n")
    error = _fails(tmp_path, "cliconsummation", folder)
    assert error.endswith(f"cannot read CliConSummation sheet {folder / 'dialogues.csv'}: line 4: unexpected end of data")


def test_a_folder_without_items_is_an_error_naming_it(tmp_path):
    """The wrong folder (no sheets, no reports) is told, not a run of 0 rows."""
    empty = tmp_path / "empty"
    (empty / "Visuals").mkdir(parents=True)
    assert _fails(tmp_path, "cliconsummation", empty).endswith(
        f"no items in cliconsummation {empty}: it holds no dialogue in a *.csv sheet")
    assert _fails(tmp_path, "mimic_cxr", empty).endswith(f"no items in mimic_cxr {empty}: it holds no report files/p*/p*/s*.txt")


def test_a_report_with_a_bom_is_read(tmp_path):
    """A report saved with a BOM before its first header, "FINDINGS:", has that section."""
    folder = tmp_path / "mimic"
    path = _report(folder, "10000001", "50000001")
    path.write_text(f"\ufeffFINDINGS: {FINDINGS}\r\nIMPRESSION: {IMPRESSION}\r\n")
    rows, rejects, _ = _run(tmp_path, "mimic_cxr", folder)
    assert [r["reference_summary"] for r in rows] == [IMPRESSION] and rejects == {}

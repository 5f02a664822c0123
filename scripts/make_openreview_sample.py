"""Make the MCiteBench demo sources: data/samples/openreview/openreview.warc.gz, a WARC recording
of the OpenReview API v2 that `harvest_openreview` replays offline (mode: replay).

It holds the venue's submission listing in API v2 shape (`/notes?invitation=...&details=replies`,
paged two notes at a time) and each paper's PDF as answered by `/pdf?id=<forum>`, recorded through
the fetch layer's WarcRecorder under the URLs the harvest asks for
(stages.mcitebench.harvest_openreview.api_url).

The four papers are generated here with reportlab, deterministically (the same PDF bytes on every
run; the WARC's record ids and dates differ):
numbered sections (1..5 with 3.1, 3.2, 4.1-4.3), raster figures and ruled tables with numbered
captions (Figure 3 has sub-figures (a) and (b)), references, and an appendix (A, A.1, B) with its
own table and figure. Papers 1 and 3 carry line numbers in the left margin, continuous across
pages, one per line of text, as in the ICLR review template. Their reviews, reviewer follow-ups and
author rebuttals cite "Table 2", "Figure 3", "Section 4.2", "Section 4.3, Line 39", an appendix
table, and (paper 2) a figure that does not exist, so the evidence pairing downstream has both
resolvable references and rejects to make. A fifth, withdrawn submission has no PDF.

    python scripts/make_openreview_sample.py [--out data/samples/openreview/openreview.warc.gz]
    python scripts/make_openreview_sample.py --papers 20 --page-size 1000 --out <cache>/openreview.warc.gz   # the rehearsal's

--papers N (default 4, the demo) writes N forums with PDFs: after the four papers come variants of
them (paper k + 4j: its own forum id, submission number, title "... (Study j + 1)", method name
and scores), so every forum has its own notes. --page-size must be the harvest's `page_size` (the
listing's URLs carry it; the demo's 2, the real recipe's 1000): replay finds answers by URL.
"""
from __future__ import annotations

import argparse
import io
import json
import re
import sys
from pathlib import Path

from PIL import Image, ImageDraw
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader, simpleSplit
from reportlab.pdfgen import canvas

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stages.core.fetch import WarcRecorder  # noqa: E402
from stages.mcitebench.harvest_openreview import api_url  # noqa: E402

BASE_URL = "https://api2.openreview.net"  # the demo config's base_url: replay looks answers up by URL
VENUE = "ICLR.cc/2025/Conference"
INVITATION = f"{VENUE}/-/Submission"
PAGE_SIZE = 2  # notes per listing page, so the replay exercises paging
LEFT, RIGHT, TOP, BOTTOM = 72, 540, 730, 72
BODY, LEADING = 10, 12.5


# --- figures (raster, drawn with PIL) --------------------------------------------------------
def chart(kind: str, seed: int, size=(480, 280)) -> bytes:
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    w, h = size
    draw.line([(40, h - 30), (w - 10, h - 30)], fill="black", width=2)
    draw.line([(40, 10), (40, h - 30)], fill="black", width=2)
    colors = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]
    if kind == "bars":
        for i in range(8):
            top = 30 + ((seed * 37 + i * 53) % (h - 80))
            draw.rectangle([55 + i * (w - 70) // 8, top, 45 + (i + 1) * (w - 70) // 8, h - 31], fill=colors[i % 4])
    else:
        for c in range(3):
            pts = [(45 + x * (w - 60) // 20, h - 40 - int((h - 70) * (1 - 1 / (1 + 0.3 * x * (c + 1 + seed % 3))))) for x in range(21)]
            draw.line(pts, fill=colors[c], width=3)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


# --- layout ----------------------------------------------------------------------------------
class Layout:
    """A one-column paper laid out top to bottom; records which margin line numbers each
    paragraph got, per section, so rebuttals can cite lines that really exist."""

    def __init__(self, out: io.BytesIO, line_numbers: bool):
        self.c = canvas.Canvas(out, pagesize=letter, invariant=1)
        self.c.setAuthor("Anonymous")
        self.line_numbers = line_numbers
        self.y = TOP
        self.line = 0
        self.section = None
        self.lines_of: dict[str, list[int]] = {}

    def need(self, height: float) -> None:
        if self.y - height < BOTTOM:
            self.page_break()

    def page_break(self) -> None:
        self.c.showPage()
        self.y = TOP

    def text_line(self, text: str, font: str, size: float, x: float = LEFT) -> None:
        self.need(LEADING)
        self.c.setFont(font, size)
        self.c.drawString(x, self.y, text)
        if self.line_numbers:
            self.line += 1
            self.c.setFont("Helvetica", 7)
            self.c.drawRightString(50, self.y, f"{self.line:03d}")
            if self.section:
                self.lines_of.setdefault(self.section, []).append(self.line)
        self.y -= LEADING

    def title(self, text: str) -> None:
        self.c.setFont("Times-Bold", 16)
        for part in simpleSplit(text, "Times-Bold", 16, RIGHT - LEFT):
            self.c.drawCentredString((LEFT + RIGHT) / 2, self.y, part)
            self.y -= 20
        self.c.setFont("Times-Italic", 10)
        self.c.drawCentredString((LEFT + RIGHT) / 2, self.y, "Anonymous authors. Paper under double-blind review.")
        self.y -= 24

    def heading(self, text: str) -> None:
        self.need(LEADING * 3)
        self.y -= 6
        first = text.split()[0]
        self.section = first if re.fullmatch(r"(\d+|[A-Z])(\.\d+)*", first) else None
        self.text_line(text, "Times-Bold", 12 if "." not in text.split()[0] else 11)
        self.y -= 2

    def para(self, text: str) -> None:
        for part in simpleSplit(text, "Times-Roman", BODY, RIGHT - LEFT):
            self.text_line(part, "Times-Roman", BODY)
        self.y -= 5

    def caption(self, text: str, x: float = LEFT + 30, width: float = RIGHT - LEFT - 60) -> None:
        self.c.setFont("Times-Roman", 9)
        for part in simpleSplit(text, "Times-Roman", 9, width):
            self.c.drawString(x, self.y, part)
            self.y -= 11

    def figure(self, caption: str, png: bytes, sub: list[tuple[str, bytes]] | None = None) -> None:
        if sub:
            self.need(170 + 40)
            self.y -= 140
            for i, (subcap, data) in enumerate(sub):
                x = LEFT + 10 + i * 235
                self.c.drawImage(ImageReader(io.BytesIO(data)), x, self.y, 215, 135)
                self.c.setFont("Times-Roman", 9)
                self.c.drawString(x + 50, self.y - 12, subcap)
            self.y -= 28
        else:
            self.need(180 + 40)
            self.y -= 175
            self.c.drawImage(ImageReader(io.BytesIO(png)), LEFT + 84, self.y, 300, 175)
            self.y -= 14
        self.caption(caption)
        self.y -= 8

    def table(self, caption: str, header: list[str], rows: list[list[str]]) -> None:
        height = 14 * (len(rows) + 1) + 40
        self.need(height)
        self.caption(caption)
        self.y -= 4
        width = 90 * len(header)
        x0 = (LEFT + RIGHT - width) / 2
        top = self.y + 10
        for r, row in enumerate([header, *rows]):
            self.c.setFont("Times-Bold" if r == 0 else "Times-Roman", 9)
            for i, cell in enumerate(row):
                self.c.drawCentredString(x0 + 45 + i * 90, self.y, cell)
            self.y -= 14
        bottom = self.y + 10
        self.c.setLineWidth(0.8)
        for yy in (top, top - 14, bottom):
            self.c.line(x0, yy, x0 + width, yy)
        self.y -= 10

    def save(self) -> None:
        self.c.save()


# --- the papers ------------------------------------------------------------------------------
PAPERS = [
    dict(forum="GsA7xk2Qp1", number=101, line_numbers=True, decision="Accept (Poster)",
         title="Gated Sparse Adapters for Parameter-Efficient Fine-Tuning",
         keywords=["parameter-efficient fine-tuning", "adapters", "sparsity"],
         method="GSA", task="instruction tuning", data="the FLAN-mini suite", base="LoRA", metric="accuracy",
         scores=("71.4", "68.9", "66.2"), speed=("1.8", "2.6")),
    dict(forum="RcR9mT4vLe", number=102, line_numbers=False, decision="Accept (Oral)",
         title="Retrieval-Augmented Chart Reasoning with Visual Program Sketches",
         keywords=["chart question answering", "retrieval", "multimodal reasoning"],
         method="ChartSketch", task="chart question answering", data="the ChartQA benchmark", base="DePlot", metric="relaxed accuracy",
         scores=("78.2", "74.5", "70.1"), speed=("0.9", "1.4")),
    dict(forum="CnS3uW8yHa", number=103, line_numbers=True, decision="Reject",
         title="Curriculum Noise Injection for Robust Speech Recognition",
         keywords=["speech recognition", "robustness", "curriculum learning"],
         method="CNI", task="noisy speech recognition", data="the CHiME-style test sets", base="SpecAugment", metric="word error rate",
         scores=("9.7", "11.3", "12.8"), speed=("3.2", "3.5")),
    dict(forum="LyT5pD1zKo", number=104, line_numbers=False, decision="Accept (Poster)",
         title="Contrastive Layout Pretraining for Document Understanding",
         keywords=["document understanding", "layout", "contrastive pretraining"],
         method="CLP", task="document entity extraction", data="the FUNSD and CORD datasets", base="LayoutLM", metric="F1",
         scores=("84.6", "81.0", "79.3"), speed=("2.1", "2.4")),
]


def body(p: dict) -> list[tuple]:
    """The blocks of a paper: short, dense paragraphs so paper 1's Section 4.3 holds line 39."""
    m, t, d, b, metric = p["method"], p["task"], p["data"], p["base"], p["metric"]
    s1, s2, s3 = p["scores"]
    fast, slow = p["speed"]
    seed = p["number"]
    return [
        ("h", "Abstract"),
        ("p", f"We present {m}, a method for {t}. On {d}, {m} reaches {s1} {metric} against {s2} for {b}, while it "
              f"updates far fewer parameters and trains faster. We explain where the gains come from with ablations, "
              f"measure the cost of training, and release the code."),
        ("h", "1 Introduction"),
        ("p", f"Progress in {t} depends on methods that are both accurate and cheap to train. Strong baselines such as "
              f"{b} spend their budget uniformly over the model, although only a small part of it matters for a given "
              f"task. We ask whether a method can find that part and spend the budget there."),
        ("p", f"We introduce {m}, which selects the units worth updating and updates them with a light rule. Our "
              f"contributions are the method, an analysis of its components, and a study of its cost."),
        ("p", f"Section 3 describes {m}, Section 4 reports experiments on {d}, and the appendix gives the "
              f"hyperparameters and further results."),
        ("h", "2 Related Work"),
        ("p", f"{b} is the standard baseline for {t}; later work adds capacity instead of structure, and sparse "
              f"methods select units once, before training, rather than learning the selection."),
        ("h", "3 Method"),
        ("p", f"{m} combines a selection step with a light update step, applied at every layer; Figure 1 gives an "
              f"overview of the training pipeline."),
        ("fig", "Figure 1: Overview of the training pipeline of " + m + ".", chart("lines", seed)),
        ("h", "3.1 Selection"),
        ("p", "A learned gate scores every unit and keeps the top fraction of the scores, so that only 12% of the "
              "units receive updates; the gate is trained jointly with the task loss."),
        ("h", "3.2 Update Rule"),
        ("p", "Kept units are updated with a low-rank step whose rank is fixed per layer; Table 1 lists the "
              "resulting numbers of trainable parameters for every method we compare."),
        ("tab", "Table 1: Trainable parameters of each method.", ["Method", "Params (M)", "Share (%)"],
         [[b, "4.2", "0.6"], [m, "1.1", "0.2"], ["Full", "770", "100"]]),
        ("h", "4 Experiments"),
        ("p", f"We evaluate on {d} with three seeds and report the mean {metric}; all differences we discuss "
              f"exceed two standard deviations across seeds."),
        ("h", "4.1 Setup"),
        ("p", "All runs share one budget of 10k steps, one learning-rate schedule and the same data order; "
              "Table 2 gives the main results on the development and test splits."),
        ("tab", "Table 2: Main results (" + metric + ").", ["Method", "Dev", "Test"],
         [[m, s1, s1], [b, s2, s2], ["Prompting", s3, s3]]),
        ("h", "4.2 Ablations"),
        ("p", f"Removing the gate costs 2.5 points of {metric}, and removing the low-rank step costs 1.1 points; "
              f"replacing the learned gate with a random one is worse than removing it. Figure 2 plots each "
              f"ablation across the three seeds."),
        ("p", "The two components are complementary: each recovers about half of the loss caused by removing "
              "the other, and neither helps when the budget is doubled."),
        ("fig", "Figure 2: Ablation of the gate and of the update rule.", chart("bars", seed)),
        ("h", "4.3 Efficiency"),
        ("p", f"{m} trains at {fast} steps per second against {slow} for {b} on one GPU. Memory drops by 38% because "
              f"frozen units keep no optimizer state, and the gap widens with model size, as Figure 3 shows for "
              f"five model sizes. Table 3 reports the wall-clock cost of one epoch, including evaluation, for the "
              f"two strongest methods. The saving holds at every batch size we tried, from 8 to 256 examples, "
              f"and at both sequence lengths of the benchmark."),
        ("subfig", "Figure 3: Efficiency of " + m + ". (a) throughput against model size; (b) peak memory against model size.",
         [("(a) Throughput", chart("lines", seed + 1, (430, 270))), ("(b) Peak memory", chart("bars", seed + 2, (430, 270)))]),
        ("tab", "Table 3: Wall-clock cost for one epoch.", ["Method", "Hours", "GPU mem (GB)"],
         [[m, "1.9", "14"], [b, "2.7", "22"]]),
        ("h", "5 Conclusion"),
        ("p", f"{m} matches or beats {b} on {t} while training faster; its gate is the main source of the gain."),
        ("h", "References"),
        ("p", f"Anonymous. A study of {b}. In Proceedings of a Conference, 2023."),
        ("break",),
        ("h", "A Additional Experiments"),
        ("p", "This appendix repeats the main experiment with five more seeds; the ranking of methods does not change."),
        ("h", "A.1 Hyperparameters"),
        ("p", "Table 4 lists every hyperparameter; Figure 4 shows the sensitivity to the kept fraction."),
        ("tab", "Table 4: Hyperparameters used in all runs.", ["Name", "Value", "Range searched"],
         [["learning rate", "3e-4", "1e-4 to 1e-3"], ["kept fraction", "0.12", "0.05 to 0.5"], ["rank", "8", "4 to 32"]]),
        ("fig", "Figure 4: Sensitivity of " + metric + " to the kept fraction.", chart("lines", seed + 3)),
        ("h", "B Proofs"),
        ("p", "The gate is a monotone function of the unit scores, so the top fraction is well defined."),
    ]


def make_pdf(p: dict) -> tuple[bytes, dict[str, list[int]]]:
    out = io.BytesIO()
    lay = Layout(out, p["line_numbers"])
    lay.title(p["title"])
    for block in body(p):
        kind = block[0]
        if kind == "h":
            lay.heading(block[1])
        elif kind == "p":
            lay.para(block[1])
        elif kind == "fig":
            lay.figure(block[1], block[2])
        elif kind == "subfig":
            lay.figure(block[1], b"", sub=block[2])
        elif kind == "tab":
            lay.table(block[1], block[2], block[3])
        elif kind == "break":
            lay.page_break()
    lay.save()
    return out.getvalue(), lay.lines_of


# --- the API v2 notes ------------------------------------------------------------------------
def wrap(fields: dict) -> dict:
    return {k: {"value": v} for k, v in fields.items()}


def note(p: dict, note_id: str, kind: str, who: str, content: dict, replyto: str | None, day: int) -> dict:
    group = f"{VENUE}/Submission{p['number']}"
    signature = f"{VENUE}/Program_Chairs" if who == "Program_Chairs" else f"{group}/{who}"
    return {
        "id": note_id, "forum": p["forum"], "replyto": replyto or p["forum"], "number": day,
        "cdate": 1731000000000 + p["number"] * 10_000_000 + day * 3_600_000, "mdate": None,
        "invitations": [f"{group}/-/{kind}"], "domain": VENUE, "signatures": [signature],
        "readers": ["everyone"], "writers": [VENUE, signature], "content": wrap(content),
    }


def review(p, note_id, reviewer, questions, weaknesses, rating, day):
    return note(p, note_id, "Official_Review", reviewer, {
        "summary": f"The paper proposes {p['method']} for {p['task']}.",
        "soundness": 3, "presentation": 3, "contribution": 2,
        "strengths": "Clear writing and a simple method.", "weaknesses": weaknesses, "questions": questions,
        "flag_for_ethics_review": ["No ethics review needed."], "rating": rating, "confidence": 4, "code_of_conduct": "Yes",
    }, None, day)


def comment(p, note_id, who, text, replyto, day, title=None):
    content = {"comment": text}
    if title:
        content = {"title": title, **content}
    return note(p, note_id, "Official_Comment", who, content, replyto, day)


def replies(p: dict, lines_of: dict[str, list[int]]) -> list[dict]:
    f, m, b = p["forum"][:4], p["method"], p["base"]
    r1, r2 = ("Reviewer_" + p["forum"][:4], "Reviewer_" + p["forum"][-4:])

    def lines(section: str, index: int) -> int:
        return lines_of[section][index]

    if p["number"] == 101:
        assert 39 in lines_of["4.3"], f"paper 1: line 39 must lie in Section 4.3, got {lines_of['4.3']}"
        efficiency = "Section 4.3, Line 39"
    elif p["line_numbers"]:
        efficiency = f"Section 4.3, Line {lines('4.3', 1)}"
    else:
        efficiency = "Section 4.3"
    answers = {
        101: ("The gate matters most: removing it costs 2.5 points, as shown in Table 2 and discussed in Section 4.2.",
              f"{m} trains faster than {b}; see {efficiency} and Figure 3.",
              "All hyperparameters, including the kept fraction, are listed in Table 4 in Appendix A.1."),
        102: (f"{m} improves over {b} on every split, as shown in Table 2 and Figure 2.",
              f"The throughput numbers are in {efficiency} and Figure 3; the error analysis is in Figure 7.",
              "The parameter counts are in Table 1."),
        103: (f"The gain of {m} under noise is reported in Table 2 and analysed in Section 4.2.",
              f"Decoding cost is discussed in {efficiency}; Figure 3 (b) shows the memory.",
              "We add the searched ranges in Table 4 (Appendix A.1)."),
        104: (f"{m} is compared with {b} in Table 2; the ablation in Figure 2 isolates the contrastive loss.",
              f"Training cost is given in Table 3 and {efficiency}.",
              "Hyperparameters follow Appendix A.1."),
    }[p.get("template", p["number"])]  # a variant answers as the paper it varies
    notes = [
        review(p, f"{f}Rv1", r1, f"How much does each component of {m} contribute to the final {p['metric']}?",
               "The ablations are thin.", 6, 1),
        review(p, f"{f}Rv2", r2, f"Is {m} actually cheaper to train than {b}?", "Efficiency claims lack detail.", 5, 2),
        comment(p, f"{f}An1", "Authors", answers[0], f"{f}Rv1", 3, title="Response to Reviewer 1"),
        comment(p, f"{f}An2", "Authors", answers[1], f"{f}Rv2", 4, title="Response to Reviewer 2"),
        comment(p, f"{f}Fu2", r2, "Thanks. Which hyperparameters did you tune, and over what ranges?", f"{f}An2", 5),
        comment(p, f"{f}An3", "Authors", answers[2], f"{f}Fu2", 6, title="Follow-up"),
        note(p, f"{f}Mr1", "Meta_Review", "Area_Chair_" + f, {
            "metareview": f"The reviewers agree {m} is simple and effective.",
            "additional_comments_on_reviewer_discussion": "The rebuttal answered the efficiency questions.",
        }, None, 7),
        note(p, f"{f}Dc1", "Decision", "Program_Chairs", {"title": "Paper Decision", "decision": p["decision"], "comment": ""}, None, 8),
    ]
    return notes


def submission(p: dict, reply_notes: list[dict]) -> dict:
    return {
        "id": p["forum"], "forum": p["forum"], "number": p["number"],
        "cdate": 1727300000000 + p["number"] * 1000, "mdate": 1732000000000,
        "invitations": [INVITATION, f"{VENUE}/Submission{p['number']}/-/Revision"], "domain": VENUE,
        "signatures": [f"{VENUE}/Submission{p['number']}/Authors"], "readers": ["everyone"],
        "content": wrap({
            "title": p["title"], "authors": ["Anonymous"], "authorids": [f"{VENUE}/Submission{p['number']}/Authors"],
            "keywords": p["keywords"], "abstract": f"We present {p['method']}, a method for {p['task']}.",
            "primary_area": "applications", "venue": "ICLR 2025 Conference Submission", "venueid": VENUE,
            "pdf": f"/pdf/{p['forum']}.pdf", "_bibtex": f"@inproceedings{{anonymous2025{p['method'].lower()},\n title={{{p['title']}}}\n}}",
        }),
        "details": {"replies": reply_notes},
    }


def withdrawn(number: int = 105) -> dict:
    p = dict(forum="WdN0pQ6rSt", number=number)
    sub = {
        "id": p["forum"], "forum": p["forum"], "number": number, "cdate": 1727300000000 + number * 1000, "mdate": 1731500000000,
        "invitations": [INVITATION, f"{VENUE}/-/Withdrawn_Submission"], "domain": VENUE,
        "signatures": [f"{VENUE}/Submission{number}/Authors"], "readers": ["everyone"],
        "content": wrap({
            "title": "A Withdrawn Study of Prompt Length", "authors": ["Anonymous"], "keywords": ["prompting"],
            "abstract": "Withdrawn by the authors before the discussion period.",
            "venue": "ICLR 2025 Conference Withdrawn Submission", "venueid": f"{VENUE}/Withdrawn_Submission",
        }),
        "details": {"replies": [note(p, "WdN0Wd1", "Withdrawal", "Authors",
                                     {"withdrawal_confirmation": "I have read and agree with the venue's withdrawal policy."}, None, 1)]},
    }
    return sub


def papers(n: int) -> list[dict]:
    """The four papers, then variants of them: paper i is PAPERS[i % 4], study i // 4 + 1."""
    out = []
    for i in range(n):
        paper, study = PAPERS[i % len(PAPERS)], i // len(PAPERS)
        if study:  # the forum's first 4 characters name its notes: each variant gets its own
            paper = dict(paper, template=paper["number"], forum=f"{study:02d}{paper['forum'][2:]}", number=101 + i, title=f"{paper['title']} (Study {study + 1})",
                         method=f"{paper['method']}{study + 1}", scores=tuple(f"{float(x) + 0.3 * study:.1f}" for x in paper["scores"]))
        out.append(paper)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/samples/openreview/openreview.warc.gz")
    ap.add_argument("--papers", type=int, default=len(PAPERS), help="forums with a PDF (the four papers, then variants of them)")
    ap.add_argument("--page-size", type=int, default=PAGE_SIZE, help="notes per listing page: the harvest's page_size")
    args = ap.parse_args()
    out = Path(args.out)
    recorder = WarcRecorder(out)
    try:
        subs = []
        written = papers(args.papers)
        for p in written:
            pdf, lines_of = make_pdf(p)
            recorder.response(api_url(BASE_URL, "/pdf", {"id": p["forum"]}), 200, "OK", [("Content-Type", "application/pdf")], pdf)
            subs.append(submission(p, replies(p, lines_of)))
        subs.append(withdrawn(101 + len(written)))
        for offset in range(0, len(subs), args.page_size):
            params = {"invitation": INVITATION, "details": "replies", "offset": offset, "limit": args.page_size}
            page = json.dumps({"notes": subs[offset : offset + args.page_size], "count": len(subs)}, indent=1) + "\n"
            recorder.response(api_url(BASE_URL, "/notes", params), 200, "OK", [("Content-Type", "application/json")], page.encode())
    except BaseException:
        recorder.abort()
        raise
    recorder.commit()
    print(f"wrote {len(subs)} submissions ({len(written)} PDFs) to {out} ({out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()

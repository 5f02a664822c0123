"""gather_images through its CLI: every page image (owned by its page, with the page text around
its placeholder) and every image search result (an auxiliary image, owned by its query, with its
title and snippet) becomes one row for cache_images; text pieces and page results are not items."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import write_table


def test_page_images_and_auxiliary_images_with_their_context(tmp_path):
    def el(page, order, kind, text, url="", n=None):
        return {"element_id": f"el:{page}:{order}", "page_id": page, "query_id": "q1", "order": order, "kind": kind, "text": text,
                "image_url": url, "placeholder": n, "chars": len(text)}

    chunk = "Clouds form when moist air cools. <image_1> Rain falls when droplets merge. " + "x" * 50 + " <image_2> The end."
    elements = [el("page:a", 0, "text", chunk), el("page:a", 1, "image", "Cloud diagram", "https://a.example/cloud.jpg", 1),
                el("page:a", 2, "image", "", "https://a.example/rain.png", 2), el("page:b", 0, "text", "No images here.")]

    def hit(kind, rank, url, page_url=""):
        return {"id": f"result:{kind}{rank}", "query_id": "q1", "query": "Why does it rain?", "kind": kind, "rank": rank, "url": url,
                "title": f"Result {rank}", "snippet": f"snippet {rank}", "page_url": page_url, "width": None, "height": None, "provider": "google"}

    results = [hit("page", 1, "https://a.example/"), hit("image", 1, "https://img.example/1.jpg", "https://gallery.example/1"),
               hit("image", 2, "https://img.example/2.jpg")]
    write_table(tmp_path / "e.parquet", elements, "retrieval_elements")
    write_table(tmp_path / "r.parquet", results, "retrieval_search_results")
    out = tmp_path / "refs.parquet"
    run_stage("gather_images", "--input", f"elements={tmp_path / 'e.parquet'}", "--input", f"results={tmp_path / 'r.parquet'}",
              "--output", f"refs={out}", "--params", json.dumps({"context_chars": 40}))
    rows = {r["url"]: r for r in pq.read_table(out).to_pylist()}
    assert sorted(rows) == ["https://a.example/cloud.jpg", "https://a.example/rain.png", "https://img.example/1.jpg", "https://img.example/2.jpg"]
    cloud = rows["https://a.example/cloud.jpg"]
    assert (cloud["owner_id"], cloud["source"], cloud["position"], cloud["alt"]) == ("page:a", "page", 1, "Cloud diagram")
    # 40 characters either side of the placeholder, the placeholder dropped, whitespace squeezed
    assert cloud["context"] == "Clouds form when moist air cools. Rain falls when droplets merge. xxxxxxx"
    assert rows["https://a.example/rain.png"]["context"] == "x" * 39 + " The end."
    aux = rows["https://img.example/1.jpg"]
    assert (aux["owner_id"], aux["query_id"], aux["source"], aux["position"], aux["alt"]) == ("q1", "q1", "aux", 1, "Result 1")
    assert aux["context"] == "snippet 1 (shown on https://gallery.example/1)" and rows["https://img.example/2.jpg"]["context"] == "snippet 2"
    report = json.loads(out.with_name(out.name + ".report.json").read_text())
    assert report["rows_in"] == 4 == report["rows_out"]["refs"] and report["stats"] == {"page_images": 2, "aux_images": 2}


def test_an_image_result_with_a_page_elements_id_is_a_duplicate_not_a_failed_write(tmp_path):
    """Each input's ids are unique, but not the two together: an image result carrying the id of a
    page image (crafted, or two tools' ids that clash) is a duplicate_id reject; the first is kept."""
    elements = [{"element_id": "img:1", "page_id": "page:a", "query_id": "q1", "order": 0, "kind": "image", "text": "",
                 "image_url": "https://a.example/x.jpg", "placeholder": 1, "chars": 0}]
    results = [{"id": "img:1", "query_id": "q1", "query": "q", "kind": "image", "rank": 1, "url": "https://img.example/1.jpg", "title": "",
                "snippet": "", "page_url": "", "width": None, "height": None, "provider": "google"}]
    write_table(tmp_path / "e.parquet", elements, "retrieval_elements")
    write_table(tmp_path / "r.parquet", results, "retrieval_search_results")
    out = tmp_path / "refs.parquet"
    run_stage("gather_images", "--input", f"elements={tmp_path / 'e.parquet'}", "--input", f"results={tmp_path / 'r.parquet'}",
              "--output", f"refs={out}")
    assert [r["url"] for r in pq.read_table(out).to_pylist()] == ["https://a.example/x.jpg"]
    [reject] = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert (reject["id"], reject["reason"]) == ("img:1", "duplicate_id")

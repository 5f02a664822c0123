"""gather_images: every image of a sampled query, in one table for the image steps (M2RAG §4.2.1
"we supplement the dataset with auxiliary images sourced from Google Image Search, using the user
queries as search input"; §4.2.2 (1) "image URLs are extracted from the web pages for image
collection"; §4.2.3: both then go through caching & conversion, filtering and deduplication).

Input `elements` (retrieval_elements, from split_pages): each image element is a page image; its
owner is its page, its context the page text around its placeholder (`context_chars` either side,
in the text chunk that holds the placeholder, `placeholder` being split_pages' pattern). Input
`results` (optional, retrieval_search_results of search_web): each image result (kind image) is
an auxiliary image of its query; its owner is the query itself, its alt text the result title and
its context the snippet and the page that shows it. Text elements and page results are not items.

Output `refs` (m2rag_image_refs): one row per image element and per image result, the input of
cache_images (owner_id, url, query_id), whose (owner_id, url) key the later image tables keep.
Rejects: null_column (an image element without a placeholder number; a bad url is cache_images'
`bad_url`), duplicate_id (an id already written: the two inputs' ids are unique each, not together). Invariant: image items in = rows out + rejected.
"""
from __future__ import annotations

from stages.core.pages import image_placeholder, surrounding_text
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"


def run(ctx) -> None:
    p = ctx.params
    if "{n}" not in p["placeholder"]:
        raise StageError(f"param placeholder must contain {{n}}, got {p['placeholder']!r}")
    writer = ctx.writer("refs")
    chunk: dict[str, str] = {}  # the last text chunk of each page: it holds the placeholders of the images after it
    written: set[str] = set()  # ids are unique within each input; an image result may still reuse a page element's id

    def unique(item_id: str) -> None:
        if item_id in written:
            raise Reject("duplicate_id", f"{item_id!r} names an image written before (a page element or image result); the first is kept")
        written.add(item_id)
    for el in sorted(ctx.read_rows("elements"), key=lambda e: (e["page_id"], e["order"])):
        if el["kind"] == "text":
            chunk[el["page_id"]] = el["text"]
            continue
        with ctx.item(el["element_id"]):
            if el["placeholder"] is None:  # the table allows it for text elements only
                raise Reject("null_column", "column 'placeholder' is null for an image element")
            unique(el["element_id"])
            context = surrounding_text(chunk.get(el["page_id"], ""), image_placeholder(p["placeholder"], el["placeholder"]), p["context_chars"])
            writer.write({"id": el["element_id"], "owner_id": el["page_id"], "query_id": el["query_id"], "source": "page",
                          "position": el["placeholder"], "url": el["image_url"], "alt": el["text"], "context": context})
            ctx.stats["page_images"] += 1
    for hit in ctx.read_rows("results"):
        if hit["kind"] != "image":
            continue
        with ctx.item(hit["id"]):
            unique(hit["id"])
            shown_on = f" (shown on {hit['page_url']})" if hit["page_url"] else ""
            writer.write({"id": hit["id"], "owner_id": hit["query_id"], "query_id": hit["query_id"], "source": "aux",
                          "position": hit["rank"], "url": hit["url"], "alt": hit["title"], "context": f"{hit['snippet']}{shown_on}".strip()})
            ctx.stats["aux_images"] += 1


STAGE = Stage(
    name="gather_images",
    version=VERSION,
    doc=__doc__,
    inputs={
        "elements": Input("retrieval_elements from split_pages", many=True, table="retrieval_elements"),
        "results": Input("retrieval_search_results of search_web: the image results are auxiliary images", many=True, optional=True,
                         table="retrieval_search_results"),
    },
    outputs={"refs": Output("m2rag_image_refs", "one row per page image and per auxiliary image")},
    params={
        "placeholder": Param(str, "<image_{n}>", "split_pages' image placeholder, to find an image's surrounding text"),
        "context_chars": Param(int, 300, "page text kept either side of an image's placeholder as its context", min=0),
    },
    run=run,
    rejects={"duplicate_id": "an image result whose id a page element (or an earlier result) already has; the first is kept"},  # a bad url is cache_images' bad_url
)

if __name__ == "__main__":
    STAGE.main()

"""cache_images: download the images a table names into the image store (M2RAG §4.2.3 (1)
"Caching & Conversion"; MAVIS §3.2 Step 2, the images of the Reddit posts).

Input `owners`: any table with an owner id column and a url column holding one url or a list of
urls (e.g. reddit_questions: `id`, `image_urls`); optionally a query id column (M2RAG: a web page
owns the image, a query owns the page). Every (owner, url) pair is one row in: it ends as one row
of `images` (table images_cached) or one reject. Each distinct url is fetched once, through the
fetch layer (stages.core.fetch: SSRF guard, retries, rate limits, byte cap, WARC record/replay),
then checked and converted by stages.core.images.normalize_image (JPEG/PNG/GIF/WEBP kept, other
raster formats to JPEG, SVG rejected, pixel limit checked before decoding) and stored once by
sha256. Images that fail to be downloaded or converted are discarded, as in M2RAG, each with a
reason: the fetch layer's (http_404, timeout, blocked_address, too_large, bad_content_type,
not_in_archive, ...), not_an_image, broken_image, pixel_bomb, unsupported_format, plus bad_url
(empty or non-http url), duplicate_url (the same url twice in one owner's list), and the runner's
null_column / bad_value for an owner or query id that is null or not a string.

Input `warcs` (optional): the WARC files fetch mode `replay` answers from, so Snakemake sees them.
Params: owner_column, url_column, query_column, store (image store root), fetch (the `fetch:`
config section), record_warc (the WARC file to write in record mode), workers, max_pixels, accept.
"""
from __future__ import annotations

import concurrent.futures

from tqdm import tqdm

from stages.core.fetch import FETCH_PARAMS, FETCH_REJECTS, FetchError, Fetcher, stage_fetch_settings
from stages.core.ids import content_id
from stages.core.images import IMAGE_REJECTS, ImageStore, normalize_image
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"


def _fetch_one(fetcher: Fetcher, store: ImageStore, url: str, accept: tuple[str, ...], max_pixels: int) -> dict | Reject:
    """The stored image's columns, or the Reject every row naming this url gets."""
    try:
        fetched = fetcher.fetch(url, accept=accept)
        image = normalize_image(fetched.body, max_pixels)
    except FetchError as err:  # the fetch layer's reason codes are the reject reasons
        return Reject(err.reason, err.detail)
    except Reject as rejected:
        return rejected
    sha = store.put(image.data, image.ext)
    return {
        "id": f"img:{sha}",
        "final_url": fetched.final_url,
        "sha256": sha,
        "format": image.format,
        "source_format": image.source_format,
        "width": image.width,
        "height": image.height,
        "bytes": len(image.data),
    }


def _pairs(ctx) -> list[tuple[str, str, int, object]]:
    """(owner, query, position, url) for every url of every input row."""
    p = ctx.params
    table = ctx.read("owners")
    owners = table.column(p["owner_column"]).to_pylist()
    urls = table.column(p["url_column"]).to_pylist()
    queries = table.column(p["query_column"]).to_pylist() if p["query_column"] else owners
    pairs = []
    for owner, query, value in zip(owners, queries, urls):
        for position, url in enumerate(value if isinstance(value, list) else [value]):
            pairs.append((owner, query, position, url))
    return pairs


def run(ctx) -> None:
    p = ctx.params
    settings = stage_fetch_settings(ctx)
    store = ImageStore(p["store"])
    pairs = _pairs(ctx)

    wanted = sorted({url for _, _, _, url in pairs if isinstance(url, str) and url.startswith(("http://", "https://"))})
    ctx.stats["unique_urls"] = len(wanted)
    results: dict[str, dict | Reject] = {}
    try:
        fetcher = Fetcher(settings, record_to=p["record_warc"] or None)
    except ValueError as err:
        raise StageError(f"fetch: {err}") from None
    with fetcher, concurrent.futures.ThreadPoolExecutor(max_workers=p["workers"]) as pool:
        futures = {pool.submit(_fetch_one, fetcher, store, url, tuple(p["accept"]), p["max_pixels"]): url for url in wanted}
        for future in tqdm(concurrent.futures.as_completed(futures), total=len(futures), desc="cache_images", unit="url"):
            results[futures[future]] = future.result()
    for key, value in fetcher.stats.items():
        ctx.stats[f"fetch_{key}"] = value

    seen: set[str] = set()
    writer = ctx.writer("images")
    for owner, query, position, url in pairs:
        ref_id = content_id("imgref", owner, url)
        where = f"owner={owner} position={position} url={url}"
        result = results.get(url) if isinstance(url, str) else None
        with ctx.item(ref_id):
            for column, value in ((p["owner_column"], owner), (p["query_column"] or p["owner_column"], query)):
                if not isinstance(value, str):  # the table is the caller's: no schema declares these columns not null
                    raise Reject("null_column" if value is None else "bad_value", f"{where}: column {column!r} is {value!r}, not an id")
            if ref_id in seen:  # whatever became of the first listing, kept or rejected
                raise Reject("duplicate_url", f"{where}: already listed earlier by this owner")
            seen.add(ref_id)
            if result is None:
                raise Reject("bad_url", f"{where}: not an http(s) url")
            if isinstance(result, Reject):
                raise Reject(result.reason, f"{where}: {result.detail}")
            writer.write({"ref_id": ref_id, "owner_id": owner, "query_id": query, "position": position, "url": url, **result})
    ctx.stats["images_stored"] = len({r["sha256"] for r in results.values() if isinstance(r, dict)})
    ctx.stats["images_converted"] = sum(1 for r in results.values() if isinstance(r, dict) and r["format"] != r["source_format"])


STAGE = Stage(
    name="cache_images",
    version=VERSION,
    doc=__doc__,
    inputs={
        "owners": Input("rows naming image urls (owner id + url or list of urls)", many=True,
                        column_params=("owner_column", "url_column", "query_column")),
        "warcs": Input("WARC files replay mode answers from (instead of fetch.replay_warcs)", many=True, optional=True, kind="file"),
    },
    outputs={"images": Output("images_cached", "one row per (owner, url) whose image is in the store")},
    params={
        "owner_column": Param(str, "id", "column with the owner's id", min=1),
        "url_column": Param(str, "image_urls", "column with one url or a list of urls", min=1),
        "query_column": Param(str, "", "column with the query id; empty: the owner is its own query"),
        "store": Param(str, "data/cache/images", "image store root (content-addressed, shared across runs)", folder="writes"),
        **FETCH_PARAMS,
        "workers": Param(int, 8, "concurrent downloads (per-host limits still apply)", min=1),
        "max_pixels": Param(int, 64_000_000, "refuse images declaring more pixels than this, before decoding", min=1),
        "accept": Param(list, ["image/", "application/octet-stream", "binary/octet-stream"], "allowed Content-Types ('x/' = prefix); the bytes are checked anyway", items=str),
    },
    run=run,
    rejects={
        **FETCH_REJECTS,
        **IMAGE_REJECTS,
        "bad_url": "empty, or not an http(s) url",
        "duplicate_url": "the same url listed twice by one owner (whatever became of the first)",
    },
)

if __name__ == "__main__":
    STAGE.main()

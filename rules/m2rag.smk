# M2RAG (seed m2rag.txt §4.1-4.3, App. A-B): ELI5 queries -> figure 5/6 filters -> figure 7 topics ->
# the per-topic sample -> web pages (the shared retrieval stages, with the retrieval: section's
# settings and this section's overrides) -> page and auxiliary images through the shared image stages
# (pHash duplicates compete per query) -> captions (§5.2) -> figure 8 text and figure 9 image scores
# (two rules of score_elements, so editing one prompt reruns one scorer) -> release.
if W.enabled("m2rag"):
    W.step("harvest_hub_dataset", family="m2rag", inputs={"data_files": W.get("m2rag.harvest_hub_dataset.data_files", [])})
    W.step("filter_queries", family="m2rag", slot="{shard}", inputs={"queries": W.out("harvest_hub_dataset", "queries")})
    _categories = {"categories": W.get("m2rag.categories")}  # Table 1, shared with the release
    W.step("classify_queries", family="m2rag", slot="{shard}", wiring=_categories,
           inputs={"filtered_queries": W.out("filter_queries", "filtered_queries")})
    W.step("sample_queries", family="m2rag", inputs={"classified_queries": W.every("classify_queries", "classified_queries")})

    _sampled = W.out("sample_queries", "sampled_queries")
    W.step("m2rag_search_web", stage="search_web", family="m2rag", shared="retrieval.search_web", inputs={"queries": _sampled},
           wiring={"id_column": "id", "text_column": "question"})
    W.step("m2rag_fetch_pages", stage="fetch_pages", family="m2rag", shared="retrieval.fetch_pages",
           inputs={"results": W.out("m2rag_search_web", "results")}, threads=2)  # fetching here, markdown in a process beside
    W.step("m2rag_split_pages", stage="split_pages", family="m2rag", shared="retrieval.split_pages",
           inputs={"pages": W.out("m2rag_fetch_pages", "pages")})
    _placeholder = {"placeholder": W.setting("split_pages", "placeholder", "retrieval.split_pages")}
    W.step("m2rag_gather_images", stage="gather_images", family="m2rag", wiring=_placeholder,
           inputs={"elements": W.out("m2rag_split_pages", "elements"), "results": W.out("m2rag_search_web", "results")})
    W.step("m2rag_cache_images", stage="cache_images", family="m2rag", shared="images.cache_images",
           inputs={"owners": W.out("m2rag_gather_images", "refs")},
           wiring={"owner_column": "owner_id", "url_column": "url", "query_column": "query_id"}, files={"images": "images_cached"})
    W.step("m2rag_filter_images", stage="filter_images", family="m2rag", shared="images.filter_images",
           inputs={"images": W.out("m2rag_cache_images", "images"), "texts": _sampled},
           wiring={"text_key": "query_id", "text_id_column": "id", "text_column": "question"}, files={"images": "images_filtered"})
    W.step("m2rag_phash_dedup", stage="phash_dedup", family="m2rag", shared="images.phash_dedup",
           inputs={"images": W.out("m2rag_filter_images", "images")}, wiring={"scope": "query"}, files={"images": "images_deduped"})
    _kept = {"images": W.out("m2rag_phash_dedup", "images"), "refs": W.out("m2rag_gather_images", "refs")}
    W.step("caption_images", family="m2rag", inputs=_kept)

    def _image_scorer(wc):
        """figure 9's scorer: keys replacing those of the text scorer (the stage merges them)."""
        given = W.get("m2rag.score_elements.vision_llm", {})
        return {"vision_llm": (given, {k: f"m2rag.score_elements.vision_llm.{k}" for k in given})}

    _elements = {"elements": W.out("m2rag_split_pages", "elements"), "queries": _sampled}
    W.step("text_score_elements", stage="score_elements", family="m2rag", section="m2rag.score_elements", models=_image_scorer,
           inputs=_elements, wiring={**_placeholder, "kinds": ["text"]}, prompts=("m2rag_score_text",))
    W.step("image_score_elements", stage="score_elements", family="m2rag", section="m2rag.score_elements", models=_image_scorer,
           inputs={**_elements, **_kept}, wiring={**_placeholder, "kinds": ["image"]}, prompts=("m2rag_score_image",))
    W.step("release_m2rag", family="m2rag", files={"manifest": "release.json"}, wiring={**_categories, "releases_dir": W.releases_dir},
           inputs={"queries": W.every("classify_queries", "classified_queries"), "sampled": _sampled,
                   "pages": W.out("m2rag_fetch_pages", "pages"), "captions": W.out("caption_images", "captions"),
                   "elements": W.out(["text_score_elements", "image_score_elements"], "scored_elements"),
                   "rejects": W.rejects_upstream("release_m2rag")})
    W.releases.append(W.steps["release_m2rag"].output("manifest"))

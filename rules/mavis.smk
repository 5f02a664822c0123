# MAVIS (seed mavis.txt §3.2): pushshift dumps or the live Reddit API -> image posts -> questions and
# VQA instances -> visual dependency (Tables 7-8) -> atomic facts (Tables 9-10) -> per-fact documents,
# entailment (App. A.3) and the annotation sample (Step 3) -> release. Post images: rules/images.smk.
if W.enabled("mavis"):
    HARVEST = "harvest_pushshift" if W.get("mavis.source", "pushshift") == "pushshift" else "harvest_reddit_live"
    POST_IMAGES = "phash_dedup" if W.get("images.filters", False) else "cache_images"  # rules/images.smk
    _post_images = W.every(POST_IMAGES, "images") if W.enabled("images") else None
    _shard_images = W.out(POST_IMAGES, "images") if W.enabled("images") else None

    def _pushshift_dumps() -> list[str]:
        """`files`, then, for `subreddit_dumps`, the submissions and comments dump of every subreddit
        in domains, found in that folder whatever the case of its name (a missing one is named as
        expected, so Snakemake reports it)."""
        section = W.get("mavis.harvest_pushshift", {})
        dumps, folder = list(section.get("files") or []), section.get("subreddit_dumps")
        if folder:
            present = {p.name.lower(): p.name for p in (Path(folder).iterdir() if Path(folder).is_dir() else [])}
            for sub in dict.fromkeys(s for subs in section["domains"].values() for s in subs):
                for kind in ("submissions", "comments"):
                    expected = f"{sub}_{kind}.zst"
                    dumps.append(str(Path(folder, present.get(expected.lower(), expected))))
        if not dumps:
            raise WiringError("mavis.harvest_pushshift: name the dumps to read: files (a list) or subreddit_dumps (a folder)")
        return dumps

    if HARVEST == "harvest_pushshift":
        W.step("harvest_pushshift", family="mavis", inputs={"dumps": _pushshift_dumps()},
               threads=2)  # posts here, comments in a reader process (stages/core/forked.py)
    else:  # the same posts from the Reddit API; the Table 11 mapping is harvest_pushshift's
        _live = W.get("mavis.harvest_reddit_live", {})
        W.step("harvest_reddit_live", family="mavis", shared="mavis.harvest_pushshift",
               inputs={"replay": _live.get("warc") if _live.get("mode") == "replay" else None})

    W.step("filter_questions", family="mavis", slot="{shard}",
           inputs={"posts": W.out(HARVEST, "posts"), "comments": W.out(HARVEST, "comments")})

    def _answerers(wc):
        """Each inspector model of Table 7: the llm: section with its own overrides."""
        values, origins = [], {}
        for i, answerer in enumerate(W.get("mavis.filter_visual_dependency.answerers", [])):
            llm, where = W.model(answerer.get("llm"), f"mavis.filter_visual_dependency.answerers.{i}.llm")
            values.append({**answerer, "llm": llm})
            origins.update({f"{i}.llm.{k}": v for k, v in where.items()})
            origins.update({f"{i}.{k}": f"mavis.filter_visual_dependency.answerers.{i}.{k}" for k in answerer if k != "llm"})
        return {"answerers": (values, origins)}

    W.step("filter_visual_dependency", family="mavis", slot="{shard}", models=_answerers,
           inputs={"instances": W.out("filter_questions", "instances"), "images": _shard_images},
           files={"instances": "checked_instances"})
    W.step("extract_atomic_facts", family="mavis", slot="{shard}",
           inputs={"instances": W.out("filter_visual_dependency", "instances"), "images": _shard_images})

    # §3.2 Step 2 (needs the retrieval layer's text index and search settings): per fact, web images and
    # C4 passages -> the fact images cached (and, when asked, through M2RAG's image filters) ->
    # entailment per modality (App. A.3) -> decisions -> the annotation sample (Step 3).
    DOCS = bool(W.get("mavis.retrieve_fact_documents")) and W.enabled("retrieval")
    if DOCS:
        _index = [f"{W.rundir}/retrieval/build_text_index/text_index.{i:05d}.parquet"
                  for i in range(W.setting("build_text_index", "shards", "retrieval.build_text_index"))]
        W.step("retrieve_fact_documents", family="mavis", slot="{shard}",
               inputs={"facts": W.out("extract_atomic_facts", "facts"), "index": _index})
        W.step("fact_cache_images", stage="cache_images", family="mavis", slot="{shard}", shared="images.cache_images",
               section=None, inputs={"owners": W.out("retrieve_fact_documents", "fact_images")},
               wiring={"owner_column": "fact_id", "url_column": "url"}, files={"images": "images_cached"})
        FACT_IMAGES = "fact_cache_images"
        if W.get("mavis.fact_image_filters", False):  # M2RAG §4.2.3's filters; MAVIS itself filters by entailment only
            W.step("fact_filter_images", stage="filter_images", family="mavis", slot="{shard}", shared="images.filter_images",
                   section=None, inputs={"images": W.out("fact_cache_images", "images"), "texts": W.out("retrieve_fact_documents", "fact_images")},
                   wiring={"text_key": "owner_id", "text_id_column": "fact_id", "text_column": "text"},
                   files={"images": "images_filtered"})
            W.step("fact_phash_dedup", stage="phash_dedup", family="mavis", slot="{shard}", shared="images.phash_dedup",
                   section=None, inputs={"images": W.out("fact_filter_images", "images")}, wiring={"scope": "owner"},
                   files={"images": "images_deduped"})
            FACT_IMAGES = "fact_phash_dedup"
        _documents = {"facts": W.out("extract_atomic_facts", "facts"), "documents": W.out("retrieve_fact_documents", "documents"),
                      "fact_documents": W.out("retrieve_fact_documents", "fact_documents")}
        W.step("filter_entailment_text", family="mavis", slot="{shard}", inputs=_documents)
        W.step("filter_entailment_image", family="mavis", slot="{shard}", inputs={**_documents, "images": W.out(FACT_IMAGES, "images")})
        W.step("decide_entailment", family="mavis", slot="{shard}",
               inputs={"fact_documents": W.out("retrieve_fact_documents", "fact_documents"),
                       "scores": W.out(["filter_entailment_text", "filter_entailment_image"], "scores")})
        W.step("sample_annotation", family="mavis", files={"sheet": "annotation_sheet.csv", "sample": "annotation_sample"},
               inputs={"instances": W.every("filter_visual_dependency", "instances"), "facts": W.every("extract_atomic_facts", "facts"),
                       "judged": W.every("decide_entailment", "judged"), "documents": W.every("retrieve_fact_documents", "documents")})

    W.step("release_mavis", family="mavis", files={"manifest": "release.json"},
           wiring={"releases_dir": W.releases_dir, "docs_per_fact": W.setting("sample_annotation", "docs_per_fact", "mavis.sample_annotation")},
           inputs={"instances": W.every("filter_visual_dependency", "instances"), "questions": W.every("filter_questions", "questions"),
                   "facts": W.every("extract_atomic_facts", "facts"), "question_images": _post_images,
                   "documents": W.every("retrieve_fact_documents", "documents") if DOCS else None,
                   "judged": W.every("decide_entailment", "judged") if DOCS else None,
                   "document_images": W.every(FACT_IMAGES, "images") if DOCS else None,
                   "annotations": W.get("mavis.annotations"), "rejects": W.rejects_upstream("release_mavis")})
    W.releases.append(W.steps["release_mavis"].output("manifest"))

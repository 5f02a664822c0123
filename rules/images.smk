# Web images of the MAVIS posts (seed m2rag.txt §4.2.3, mavis.txt §3.2 Step 2):
# questions -> cache_images (download/replay, convert, store) -> filter_images (size, CLIP)
# -> phash_dedup (near-duplicates per post). One job per shard; tables join the mavis catalog.
IMAGES = config.get("images", {})
FETCH = config.get("fetch", {})

if IMAGES.get("enabled", False) and config.get("mavis", {}).get("enabled", False):
    _fetch_mode = FETCH.get("mode", "live")
    _fetch = {k: v for k, v in FETCH.items() if k != "replay_warcs"}  # replay WARCs are rule inputs
    _replay = {"warcs": FETCH.get("replay_warcs", [])} if _fetch_mode == "replay" else {}
    _record = {"sidecar_warc": f"{RUNDIR}/warc/mavis/cache_images.{{shard}}.warc.gz"} if _fetch_mode == "record" else {}

    rule cache_images:
        input:
            stage=stage_code("cache_images"),
            owners=run_path("mavis", "filter_questions", "questions", "{shard}"),
            **_replay,
        output:
            images=run_path("mavis", "cache_images", "images_cached", "{shard}"),
            sidecar_rejects=run_path("mavis", "cache_images", "images_cached", "{shard}") + ".rejects.parquet",
            **_record,
        params:
            io=stage_io,
            version=stage_version("cache_images"),
            settings=lambda w: settings({
                "owner_column": "id", "url_column": "image_urls", "store": IMAGES.get("store", "data/cache/images"),
                "fetch": _fetch, **IMAGES.get("cache_images", {}),
                "record_warc": _record["sidecar_warc"].format(shard=w.shard) if _record else "",
            }),
        log:
            log_path("mavis", "cache_images", "{shard}"),
        benchmark:
            bench_path("mavis", "cache_images", "{shard}")
        shell:
            stage_shell("cache_images")

    rule filter_images:
        input:
            stage=stage_code("filter_images"),
            images=run_path("mavis", "cache_images", "images_cached", "{shard}"),
            texts=run_path("mavis", "filter_questions", "questions", "{shard}"),
        output:
            images=run_path("mavis", "filter_images", "images_filtered", "{shard}"),
            sidecar_rejects=run_path("mavis", "filter_images", "images_filtered", "{shard}") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("filter_images"),
            settings=settings({
                "store": IMAGES.get("store", "data/cache/images"), "text_key": "owner_id",
                "text_id_column": "id", "text_column": "question", **IMAGES.get("filter_images", {}),
            }),
        resources:
            gpu=int(IMAGES.get("filter_images", {}).get("device") == "cuda"),
        log:
            log_path("mavis", "filter_images", "{shard}"),
        benchmark:
            bench_path("mavis", "filter_images", "{shard}")
        shell:
            stage_shell("filter_images")

    rule phash_dedup:
        input:
            stage=stage_code("phash_dedup"),
            images=run_path("mavis", "filter_images", "images_filtered", "{shard}"),
        output:
            images=run_path("mavis", "phash_dedup", "images_deduped", "{shard}"),
            sidecar_rejects=run_path("mavis", "phash_dedup", "images_deduped", "{shard}") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("phash_dedup"),
            settings=settings({"store": IMAGES.get("store", "data/cache/images"), **IMAGES.get("phash_dedup", {})}),
        log:
            log_path("mavis", "phash_dedup", "{shard}"),
        benchmark:
            bench_path("mavis", "phash_dedup", "{shard}")
        shell:
            stage_shell("phash_dedup")

    for _rule in (rules.cache_images, rules.filter_images, rules.phash_dedup):
        CATALOG_TABLES.extend(expand(_rule.output.images, shard=SHARDS))

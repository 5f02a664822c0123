# Web images of the MAVIS posts (mavis.txt §3.2 Step 1): questions -> cache_images (download or
# replay, convert, store); with images.filters, M2RAG's (m2rag.txt §4.2.3) -> filter_images (size,
# CLIP) -> phash_dedup (near-duplicates per post). One job per shard; the settings are the images: section's.
if W.enabled("images") and W.enabled("mavis"):
    W.step("cache_images", family="mavis", slot="{shard}", shared="images.cache_images", section=None,
           inputs={"owners": W.out("filter_questions", "questions")}, wiring={"owner_column": "id", "url_column": "image_urls"},
           files={"images": "images_cached"})
    if W.get("images.filters", False):
        W.step("filter_images", family="mavis", slot="{shard}", shared="images.filter_images", section=None,
               inputs={"images": W.out("cache_images", "images"), "texts": W.out("filter_questions", "questions")},
               wiring={"text_key": "owner_id", "text_id_column": "id", "text_column": "question"}, files={"images": "images_filtered"})
        W.step("phash_dedup", family="mavis", slot="{shard}", shared="images.phash_dedup", section=None,
               inputs={"images": W.out("filter_images", "images")}, files={"images": "images_deduped"})

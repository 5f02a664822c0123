# The shared retrieval layer (seed mavis.txt §3.2 Step 2, m2rag.txt §4.2.1-4.2.2): search_web ->
# fetch_pages -> split_pages for web pages and images; build_text_index (one job per corpus shard) ->
# retrieve_text for corpus passages. Here on `retrieval.queries`; MAVIS and M2RAG run the same stages
# on their own queries. Settings: the retrieval: section, one subsection per stage.
if W.enabled("retrieval"):
    _queries = W.get("retrieval.queries", [])
    if _queries:  # the layer on its own queries; MAVIS and M2RAG need only its settings and index
        W.step("search_web", family="retrieval", shared="retrieval.search_web", section=None, inputs={"queries": _queries})
        W.step("fetch_pages", family="retrieval", shared="retrieval.fetch_pages", section=None,
               inputs={"results": W.out("search_web", "results")}, threads=2)  # fetching here, markdown in a process beside
        W.step("split_pages", family="retrieval", shared="retrieval.split_pages", section=None,
               inputs={"pages": W.out("fetch_pages", "pages")})
    _index_shards = [{"index_shard": f"{i:05d}"} for i in range(W.setting("build_text_index", "shards", "retrieval.build_text_index"))]
    W.step("build_text_index", family="retrieval", slot="{index_shard}", domain=_index_shards, shared="retrieval.build_text_index",
           section=None, inputs={"data_files": W.get("retrieval.build_text_index.corpus.data_files", [])},
           per_job=lambda wc: {"shard": int(wc["index_shard"]), "shards": len(_index_shards),
                               "corpus": {k: v for k, v in W.setting("build_text_index", "corpus", "retrieval.build_text_index").items() if k != "data_files"}},
           files={"index": "text_index"}, constraints={"index_shard": r"\d{5}"})
    if _queries:
        W.step("retrieve_text", family="retrieval", shared="retrieval.retrieve_text", section=None,
               inputs={"queries": _queries, "index": W.every("build_text_index", "index")})

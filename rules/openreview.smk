# MCiteBench sources (seed mcitebench.txt §3.2): the OpenReview API v2 harvest -> papers, reviews,
# comments, rebuttal threads and PDFs -> MinerU parsing into evidence elements.
if W.enabled("mcitebench"):
    _harvest = W.get("mcitebench.harvest_openreview", {})
    # a replay lists its WARC as an input: a new recording reruns the harvest and what follows
    W.step("harvest_openreview", family="mcitebench",
           inputs={"replay": _harvest.get("warc") if _harvest.get("mode") == "replay" else None})
    W.step("parse_pdfs", family="mcitebench", inputs={"papers": W.out("harvest_openreview", "papers")},
           wiring={"pdf_store": W.setting("harvest_openreview", "pdf_store", "mcitebench.harvest_openreview")})

"""Generate the rehearsal's replayed sources, larger than the demo's, with the demo's generators.

    python scripts/make_rehearsal_sources.py --out data/cache/rehearsal \
        [--config config/config.yaml --config config/recipe_real.yaml] [--posts 2000] [--questions 200] [--papers 20]

Into --out (nothing is committed: about 55 MB, about 75 s on two cores):
- reddit/RS_2023-01.zst, RC_2023-01.zst, askscience_*.zst: --posts pushshift posts with their
  comments (make_reddit_sample.py); reddit/images.warc.gz: every post image (make_image_warc.py);
- eli5.jsonl: --questions ELI5 questions over M2RAG's ten topics (make_eli5_sample.py);
- openreview.warc.gz: --papers OpenReview forums with PDFs, listed in pages of the merged config's
  mcitebench.harvest_openreview.page_size (make_openreview_sample.py);
- retrieval/web.warc.gz: the search answers, pages and images of the retrieval queries and of every
  ELI5 question, with the merged config's search settings (make_retrieval_sample.py; a recipe that
  reads the engine id from a variable gets GOOGLE_CSE_ID=rehearsal-engine unless it is set);
- corpus/: a C4-like text corpus (make_text_corpus.py).
The MAVIS fact images (make_mavis_fact_sample.py) are not here: their queries are the atomic facts
a run extracts, so that archive is made after extract_atomic_facts.

sources.json lists the files, their sizes, the seconds each generator took and the inputs' hash; a
second run with the same generators, configs and counts finds the hash and does nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from snakemake.utils import update_config

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = ["make_reddit_sample.py", "make_image_warc.py", "make_eli5_sample.py", "make_openreview_sample.py", "make_retrieval_sample.py",
           "make_text_corpus.py"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("data/cache/rehearsal"))
    parser.add_argument("--config", action="append", help="config files merged in order (default config/config.yaml)")
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--papers", type=int, default=20)
    parser.add_argument("--documents", type=int, default=1400, help="C4-like corpus documents")
    args = parser.parse_args()
    configs = [str(Path(c).resolve()) for c in (args.config or [REPO / "config" / "config.yaml"])]
    config: dict = {}
    for path in configs:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    env = dict(os.environ)
    if config["retrieval"]["search_web"]["google"].get("engine_id_env") and not config["retrieval"]["search_web"]["google"].get("engine_id"):
        env.setdefault(config["retrieval"]["search_web"]["google"]["engine_id_env"], "rehearsal-engine")
    inputs = hashlib.sha256(json.dumps([[(REPO / "scripts" / s).read_text() for s in SCRIPTS], [Path(c).read_text() for c in configs],
                                        args.posts, args.questions, args.papers, args.documents]).encode()).hexdigest()
    out = args.out.resolve()
    manifest = out / "sources.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("inputs") == inputs:
        print(f"{manifest}: up to date")
        return
    reddit = out / "reddit"
    steps = [
        ("reddit", ["make_reddit_sample.py", "--out", reddit, "--posts", args.posts]),
        ("images", ["make_image_warc.py", "--dumps", reddit / "RS_2023-01.zst", reddit / "askscience_submissions.zst",
                    "--out", reddit / "images.warc.gz"]),
        ("eli5", ["make_eli5_sample.py", "--questions", args.questions, "--out", out / "eli5.jsonl"]),
        ("openreview", ["make_openreview_sample.py", "--papers", args.papers, "--out", out / "openreview.warc.gz",
                        "--page-size", config["mcitebench"]["harvest_openreview"]["page_size"]]),
        ("retrieval", ["make_retrieval_sample.py", *[a for c in configs for a in ("--config", c)], "--eli5", out / "eli5.jsonl",
                       "--queries", REPO / "data/samples/retrieval/queries.jsonl", "--out", out / "retrieval" / "web.warc.gz"]),
        ("corpus", ["make_text_corpus.py", "--documents", args.documents, "--out", out / "corpus"]),
    ]
    (out / "retrieval").mkdir(parents=True, exist_ok=True)
    seconds = {}
    for name, (script, *script_args) in steps:
        start = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "scripts" / script), *map(str, script_args)], cwd=REPO, env=env, check=True)
        seconds[name] = round(time.perf_counter() - start, 1)
    files = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file() and p != manifest}
    manifest.write_text(json.dumps({"inputs": inputs, "configs": configs, "seconds": seconds, "bytes": files}, indent=1) + "\n")
    print(f"wrote {len(files)} files ({sum(files.values()) / 1e6:.1f} MB) in {sum(seconds.values()):.0f} s to {out}")


if __name__ == "__main__":
    main()

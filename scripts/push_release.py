"""Upload one release folder as a dataset repository (optional; never run by the tests).

    HF_TOKEN=... python scripts/push_release.py data/releases/mavis-reddit/<version> <user>/<dataset>

The folder's README.md already carries the YAML front matter `datasets` reads (one config per
table, features, license placeholder, citation; stages/core/dataset_card.py), so the uploaded
repository loads as `datasets.load_dataset("<user>/<dataset>", "<table>")`. Set the license in the
card first. The token comes from the environment variable named by --token-env (HF_TOKEN).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("release", type=Path, help="a release folder: data/releases/<name>/<version>")
    parser.add_argument("repo_id", help="<user or org>/<dataset name>")
    parser.add_argument("--token-env", default="HF_TOKEN", help="environment variable holding the write token")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    args = parser.parse_args()
    if not (args.release / "README.md").read_text().startswith("---\n"):
        sys.exit(f"{args.release}/README.md has no dataset card front matter: rebuild the release")
    token = os.environ.get(args.token_env)
    if not token:
        sys.exit(f"set {args.token_env} to a token with write access")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(args.repo_id, repo_type="dataset", private=args.private, exist_ok=True)
    # the card, the Parquet tables and the seed-format exports; the DuckDB file is a local convenience
    api.upload_folder(folder_path=str(args.release), repo_id=args.repo_id, repo_type="dataset",
                      ignore_patterns=["benchmark.duckdb"], commit_message=f"release {args.release.name}")
    print(f"uploaded {args.release} to {args.repo_id}")


if __name__ == "__main__":
    main()

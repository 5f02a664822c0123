"""Generate the bundled Reddit pushshift demo dumps under data/samples/reddit/.

    python scripts/make_reddit_sample.py [--out data/samples/reddit] [--posts 48]
    python scripts/make_reddit_sample.py --out /tmp/big --posts 200000 --single   # benchmark-sized

Writes zstd-compressed NDJSON with the fields real pushshift dumps carry: a monthly pair
(RS_2023-01.zst, RC_2023-01.zst) and a per-subreddit pair (askscience_submissions.zst,
askscience_comments.zst). The content is seeded, so reruns produce byte-identical files. It
exercises every rule of harvest_pushshift and filter_questions: direct images, galleries with
valid and failed items, link posts, NSFW posts, subreddits outside MAVIS Table 11, a post
repeated across dumps, nested replies, short answers, non-questions, and one bad JSON line.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson
import zstandard

SUBREDDITS = {
    "askscience": "Science",
    "Physics": "Science",
    "gardening": "Art & Design",
    "woodworking": "Art & Design",
    "personalfinance": "Business",
    "AskHistorians": "Humanities & Social Science",
    "buildapc": "Tech & Engineering",
    "AskElectronics": "Tech & Engineering",
    "medicine": "Health & Medicine",
}
OUT_OF_SCOPE = ["pics", "funny", "aww"]

TITLES = {
    "askscience": ["Why does this rock have perfectly straight stripes?", "What causes the halo around the moon in this photo?", "How did this ice form spikes pointing upward?"],
    "Physics": ["Why does the water in this glass look bent?", "What is happening to the light in this picture?", "How does this toy keep spinning so long?"],
    "gardening": ["What is wrong with the leaves of my tomato plant?", "Why are my hydrangeas turning this color?", "Is this fungus on my lawn harmful?"],
    "woodworking": ["How do I fix this split in my walnut table top?", "What kind of joint is shown in this old chair?", "Why did my finish turn cloudy like this?"],
    "personalfinance": ["Is this chart of my retirement fees normal?", "What does this line on my pay stub mean?", "Should I worry about this charge on my statement?"],
    "AskHistorians": ["What uniform is the soldier in this photo wearing?", "Who would have used a tool like this in the 1800s?", "Why does this old map show the coast so differently?"],
    "buildapc": ["Why is my GPU sagging like this?", "Is this cable management going to cause airflow issues?", "What is this header on my motherboard for?"],
    "AskElectronics": ["What does this component on my board do?", "Why did this capacitor bulge like this?", "How should I read the markings on this resistor?"],
    "medicine": ["What does this rash pattern usually indicate?", "Why is this X-ray showing a bright spot?", "How is this kind of splint supposed to be worn?"],
}
NON_QUESTIONS = ["Look at this sunset over the lake", "My first attempt at a dovetail", "Finally finished my build!", "TIL about this strange plant"]
SENTENCES = [
    "The pattern you see is the result of a slow process that repeats over many seasons.",
    "Each layer records a slightly different set of conditions, which is why the bands vary in width and color.",
    "If you look closely at the edges, you can usually tell which layer formed first and which came later.",
    "Experts normally confirm this by comparing several samples rather than relying on a single photo.",
    "In practice, the simplest explanation is that temperature and moisture changed in a regular cycle.",
    "You can reproduce a similar effect at home with a shallow tray, some water and a bit of patience.",
    "The same principle shows up in many other places, from tree rings to sediment at the bottom of lakes.",
    "A common mistake is to assume the colors come from paint or dye, but the chemistry tells a different story.",
    "Most reference books describe this in their chapter on weathering and slow mineral growth.",
    "So the short answer is that nothing is wrong, and what you photographed is a textbook example.",
]


def long_answer(rng: random.Random) -> str:
    return " ".join(rng.sample(SENTENCES, 6))


def short_answer(rng: random.Random) -> str:
    return rng.choice(["Looks great!", "Same thing happened to me last year.", "Following, I want to know too.", "Nice photo. It is probably fine."])


def post(rng: random.Random, post_id: str, subreddit: str, title: str, created: int, kind: str) -> dict:
    record = {
        "id": post_id,
        "name": f"t3_{post_id}",
        "title": title,
        "selftext": rng.choice(["", "Photo attached, taken this morning.", "Any ideas? Thanks in advance."]),
        "subreddit": subreddit,
        "author": f"user_{rng.randrange(10_000)}",
        "created_utc": created,
        "score": rng.randrange(1, 5000),
        "num_comments": rng.randrange(2, 80),
        "over_18": kind == "nsfw",
        "permalink": f"/r/{subreddit}/comments/{post_id}/{title[:30].lower().replace(' ', '_')}/",
        "is_gallery": False,
        "url": f"https://i.redd.it/{post_id}img.jpg",
    }
    if kind == "gallery" or kind == "gallery_failed":
        media = [f"{post_id}m{i}" for i in range(3)]
        record["is_gallery"] = True
        record["url"] = f"https://www.reddit.com/gallery/{post_id}"
        record["gallery_data"] = {"items": [{"media_id": m, "id": 100 + i} for i, m in enumerate(media)]}
        record["media_metadata"] = {
            m: {
                "status": "failed" if kind == "gallery_failed" or i == 1 else "valid",
                "e": "Image",
                "m": "image/png",
                "s": {"x": 1024, "y": 768, "u": f"https://preview.redd.it/{m}.png?width=1024&amp;format=png&amp;auto=webp&amp;s=sig{post_id}{i}"},
            }
            for i, m in enumerate(media)
        }
    elif kind == "link":
        record["url"] = f"https://example.com/articles/{post_id}"
    elif kind == "png":
        record["url"] = f"https://i.imgur.com/{post_id}.png"
    return record


def comment(rng: random.Random, comment_id: str, post_id: str, parent: str, body: str, created: int) -> dict:
    return {
        "id": comment_id,
        "body": body,
        "link_id": f"t3_{post_id}",
        "parent_id": parent,
        "score": rng.randrange(-3, 900),
        "author": f"user_{rng.randrange(10_000)}",
        "created_utc": created,
        "subreddit": "",
    }


def build(n_posts: int, seed: int = 7) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    posts, comments = [], []
    kinds = ["image", "image", "gallery", "png", "image", "link", "gallery_failed", "nsfw", "image", "image"]
    subs = list(SUBREDDITS)
    for i in range(n_posts):
        post_id = f"p{i:06x}"
        created = 1672531200 + i * 3571
        kind = kinds[i % len(kinds)]
        if i % 13 == 5:
            subreddit, title = rng.choice(OUT_OF_SCOPE), rng.choice(TITLES["askscience"])
        else:
            subreddit = subs[i % len(subs)]
            title = rng.choice(NON_QUESTIONS) if i % 11 == 3 else rng.choice(TITLES[subreddit])
        posts.append(post(rng, post_id, subreddit, title, created, kind))
        n_comments = rng.randrange(1, 5)
        for j in range(n_comments):
            body = long_answer(rng) if (i % 6 != 2 and j == 0) else short_answer(rng)
            comments.append(comment(rng, f"c{i:06x}{j}", post_id, f"t3_{post_id}", body, created + 60 * (j + 1)))
        if i % 4 == 0:  # a long reply nested under the first comment: never an answer
            comments.append(comment(rng, f"r{i:06x}", post_id, f"t1_c{i:06x}0", long_answer(rng), created + 999))
    return posts, comments


def write_zst(path: Path, records: list[dict], bad_line: bool = False, level: int = 19) -> None:
    lines = [orjson.dumps(r) for r in records]
    if bad_line:
        lines.insert(len(lines) // 2, b'{"id": "broken", "body": "unterminated')
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/samples/reddit", type=Path)
    parser.add_argument("--posts", type=int, default=48)
    parser.add_argument("--single", action="store_true", help="only the monthly pair (for benchmarks)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    posts, comments = build(args.posts)
    if args.single:
        write_zst(args.out / "RS_2023-01.zst", posts)
        write_zst(args.out / "RC_2023-01.zst", comments)
        return
    ask_posts = [p for p in posts if p["subreddit"] == "askscience"]
    ask_ids = {p["id"] for p in ask_posts[: len(ask_posts) // 2]}
    monthly_posts = [p for p in posts if p["subreddit"] != "askscience" or p["id"] in ask_ids]
    # the per-subreddit dump repeats one post of the monthly dump: harvest keeps the first
    per_sub_posts = [p for p in ask_posts if p["id"] not in ask_ids] + ask_posts[:1]
    per_sub_ids = {p["id"] for p in per_sub_posts}
    write_zst(args.out / "RS_2023-01.zst", monthly_posts)
    write_zst(args.out / "RC_2023-01.zst", [c for c in comments if c["link_id"][3:] not in per_sub_ids or c["link_id"][3:] in ask_ids], bad_line=True)
    write_zst(args.out / "askscience_submissions.zst", per_sub_posts)
    write_zst(args.out / "askscience_comments.zst", [c for c in comments if c["link_id"][3:] in per_sub_ids and c["link_id"][3:] not in ask_ids])
    print(f"wrote {len(posts)} posts and {len(comments)} comments to {args.out}")


if __name__ == "__main__":
    main()

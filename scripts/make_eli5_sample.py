"""Generate an ELI5-shaped question file for M2RAG's query collection (m2rag.txt §4.1, App. A), spread
over the ten topics of M2RAG Table 1 (config m2rag.categories 1-10), for rehearsals larger than the
demo's hand-written data/samples/eli5.jsonl.

    python scripts/make_eli5_sample.py --questions 200 --out data/cache/rehearsal/eli5.jsonl

Each line has the fields of the ELI5 dataset as harvest_hub_dataset reads them (config
m2rag.harvest_hub_dataset.fields: q_id, title, selftext, subreddit, answers.text, ...). Question i
is about topic i % 10: one of ten subjects of that topic in one of four ELI5 phrasings, with a short
answer that explains it (the retrieval sample builds its explainer page from that answer). Seeded:
the same file on every run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

# M2RAG Table 1 topics 1-10 -> ten subjects each
TOPICS = {
    "Society & Culture": ["wedding rings", "handshakes", "tipping in restaurants", "daylight saving time", "national anthems",
                          "tattoos", "bowing in Japan", "birthday candles", "sign languages", "family surnames"],
    "Science & Mathematics": ["the blue colour of the sky", "rainbows", "prime numbers", "black holes", "ocean tides", "magnets",
                              "the number zero", "lightning", "earthquakes", "photosynthesis"],
    "Health": ["vaccines", "fevers", "pollen allergies", "deep sleep", "caffeine", "sunburn", "hiccups", "antibiotics", "blood types",
               "muscle cramps"],
    "Education & Reference": ["the Dewey decimal system", "dictionaries", "grading on a curve", "Latin roots of words", "citation styles",
                              "the periodic table layout", "world map projections", "leap years", "encyclopedias", "spelling bees"],
    "Computers & Internet": ["home Wi-Fi", "password hashing", "browser cookies", "computer viruses", "cloud storage", "QR codes",
                             "VPNs", "spam filters", "solid state drives", "IP addresses"],
    "Sports": ["the offside rule", "curveballs", "golf ball dimples", "marathon pacing", "tennis scoring", "drafting in cycling",
               "the butterfly stroke", "ski wax", "spin bowling", "the shot clock"],
    "Business & Finance": ["stock prices", "inflation", "credit scores", "interest rates", "index funds", "income tax brackets",
                           "mortgages", "venture capital", "exchange rates", "supply chains"],
    "Entertainment & Music": ["auto-tune", "film age ratings", "guitar chords", "vinyl records", "green screens", "concert ticket prices",
                              "laugh tracks", "key signatures", "animation frame rates", "streaming royalties"],
    "Family & Relationships": ["sibling rivalry", "baby sleep schedules", "family trees", "identical twins", "teenage moods",
                               "grandparents' memories", "adoption", "bedtime stories", "family budgets", "long-distance friendships"],
    "Politics & Government": ["the electoral college", "filibusters", "the separation of powers", "the census", "tariffs",
                              "the United Nations", "gerrymandering", "vetoes", "constitutions", "city councils"],
}
PHRASINGS = ["Can someone explain {s} like I'm five?", "Why do we have {s}?", "What is the point of {s}?", "What is really going on with {s}?"]


def question(i: int) -> dict:
    topic = list(TOPICS)[i % len(TOPICS)]
    round_, subject = divmod(i // len(TOPICS), len(TOPICS[topic]))
    subject = TOPICS[topic][subject]
    title = PHRASINGS[(round_ + i) % len(PHRASINGS)].format(s=subject)
    q_id = hashlib.sha1(f"eli5-{i}-{title}".encode()).hexdigest()[:8]
    answer = (f"Think of {subject} as a simple system with a few moving parts. Each part does one job, and together they explain "
              f"what you see. A diagram of {subject} makes the pieces and their order easy to follow.")
    return {"q_id": q_id, "title": title, "selftext": "I have read about it but still do not get it." if i % 3 == 0 else "",
            "document": "", "subreddit": "explainlikeimfive",
            "answers": {"a_id": [f"{q_id}a"], "text": [answer], "score": [5 + i % 17]},
            "title_urls": {"url": []}, "selftext_urls": {"url": []}, "answers_urls": {"url": []}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(question(i)) + "\n" for i in range(args.questions)))
    print(f"wrote {args.questions} questions over {min(args.questions, len(TOPICS))} topics to {args.out}")


if __name__ == "__main__":
    main()

"""Generate the demo's C4-like text corpus: data/samples/retrieval/corpus/c4-like.0000{0,1}.jsonl.gz.

    python scripts/make_text_corpus.py [--documents 1400] [--files 2] [--out data/samples/retrieval/corpus]

Records look like C4 `en` (text, url, timestamp) so build_text_index reads the demo exactly as a
real C4 stream, with the same `text_column`. The text is written for the demo, not copied from
C4: each document mixes sentences built from one topic's phrases (the sky's colour, volcanoes,
sourdough, batteries, ... : the demo queries' topics and distractors) with a little web filler,
seeded, so the corpus and its passage ids are identical on every run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

# topic -> (subjects, facts): a sentence is "<subject> <fact>."
TOPICS = {
    "sky": (["The daytime sky", "Sunlight in the atmosphere", "Blue light", "Rayleigh scattering", "The sky at sunset"],
            ["is scattered by nitrogen and oxygen molecules more strongly at short wavelengths",
             "looks blue because short blue wavelengths scatter across the whole sky",
             "turns red and orange when light crosses a thicker layer of air near the horizon",
             "scatters violet light even more, but human eyes are less sensitive to violet",
             "depends on the fourth power of the frequency of the light",
             "appears pale near the horizon where light is scattered many times"]),
    "volcano": (["A volcano", "Magma", "An eruption", "Volcanic gas", "A lava flow"],
                ["forms when molten rock rises through cracks in the crust",
                 "erupts when dissolved gases expand and pressure in the magma chamber exceeds the strength of the rock",
                 "is explosive when the magma is thick and rich in silica",
                 "pours out gently when the magma is runny basalt, as in Hawaii",
                 "releases water vapour, carbon dioxide and sulfur dioxide",
                 "builds a cone of ash and cooled lava over many eruptions"]),
    "sourdough": (["Sourdough bread", "A sourdough starter", "Wild yeast", "Lactic acid bacteria", "The dough"],
                  ["rises because wild yeast ferments sugars and releases carbon dioxide",
                   "is a culture of flour and water kept alive by regular feeding",
                   "gives the bread its sour taste by producing lactic and acetic acid",
                   "traps gas in a gluten network so the loaf expands during proofing",
                   "needs several hours of fermentation at room temperature",
                   "springs in the oven as the trapped gas expands in the heat"]),
    "battery": (["A lithium-ion battery", "The anode", "Lithium ions", "The electrolyte", "A charged cell"],
                ["stores energy by moving lithium ions from the cathode into the graphite anode while charging",
                 "releases energy when ions flow back to the cathode and electrons pass through the circuit",
                 "carries ions between the electrodes but blocks electrons",
                 "loses capacity as side reactions consume lithium over many cycles",
                 "can overheat if the separator is damaged and the electrodes touch",
                 "has a high energy density compared with nickel and lead batteries"]),
    "bees": (["A honey bee", "The hive", "A worker bee", "Pollen", "The waggle dance"],
             ["tells other bees the direction and distance of flowers",
              "collects nectar and turns it into honey by evaporating water",
              "keeps its brood warm by shivering its flight muscles",
              "is carried on the hind legs in small baskets",
              "lives for about six weeks in summer"]),
    "tides": (["The tide", "The Moon's gravity", "A spring tide", "A neap tide", "The ocean"],
              ["rises and falls twice a day on most coasts",
               "pulls the ocean into a bulge on the side of Earth facing the Moon",
               "is strongest when the Sun and Moon line up at new and full moon",
               "is weakest when the Sun and Moon pull at right angles",
               "lags behind the Moon because water takes time to move"]),
    "coffee": (["Coffee", "A coffee bean", "Roasting", "Caffeine", "Espresso"],
               ["blocks adenosine receptors and so reduces the feeling of tiredness",
                "is the seed of a cherry-like fruit",
                "turns green beans brown through the Maillard reaction",
                "is brewed by forcing hot water through finely ground coffee",
                "loses aroma quickly once it is ground"]),
}
FILLER = [
    "Read more articles like this in our weekly newsletter.",
    "This page was updated last month by our editors.",
    "Share this story with your friends.",
    "Comments are closed for this post.",
    "Photos courtesy of our readers.",
]


def document(rng: random.Random, number: int) -> dict:
    topic = rng.choice(sorted(TOPICS))
    subjects, facts = TOPICS[topic]
    second = rng.choice(sorted(TOPICS)) if rng.random() < 0.3 else topic
    sentences = []
    for _ in range(rng.randint(12, 40)):
        subjects_, facts_ = TOPICS[second] if rng.random() < 0.2 else (subjects, facts)
        sentences.append(f"{rng.choice(subjects_)} {rng.choice(facts_)}.")
        if rng.random() < 0.08:
            sentences.append(rng.choice(FILLER))
    paragraphs, i = [], 0
    while i < len(sentences):
        step = rng.randint(3, 7)
        paragraphs.append(" ".join(sentences[i : i + step]))
        i += step
    day = 1 + number % 28
    return {"text": "\n".join(paragraphs), "url": f"https://{topic}-notes.example/article/{number}", "timestamp": f"2019-04-{day:02d}T10:00:00Z"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1400)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("data/samples/retrieval/corpus"))
    args = parser.parse_args()
    rng = random.Random(0)
    args.out.mkdir(parents=True, exist_ok=True)
    docs = [document(rng, n) for n in range(args.documents)]
    docs[7]["text"] = "   "  # an empty document: build_text_index rejects it (empty_text)
    words = 0
    for f in range(args.files):
        path = args.out / f"c4-like.{f:05d}.jsonl.gz"
        part = docs[f :: args.files]
        with gzip.GzipFile(path, "wb", mtime=0) as fh:
            for doc in part:
                fh.write((json.dumps(doc) + "\n").encode())
                words += len(doc["text"].split())
        print(f"wrote {len(part)} documents to {path}")
    print(f"{args.documents} documents, {words} words")


if __name__ == "__main__":
    main()

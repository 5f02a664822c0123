# Attribution while generating (seed cite-while-you-generate.txt §3-4, Algorithm 1, App. C-E), part of
# `evaluate`: items JSONL | CliConSummation sheets | MIMIC-CXR reports -> generate_attributed (pooled attention per generated token) -> attribute_attention
# (Algorithm 1) | attribute_embedding (MiniLM + CLIP) | attribute_self (App. E); attribution_references
# (file gold + judge silver) -> score_attribution (Tables 2-3).
AT = "attribution"
if W.enabled(AT):
    # the project's JSONL, or the seed's datasets from their local folders (§4.1, App. B)
    _sources = {"jsonl": W.get(f"{AT}.items"), "cliconsummation": W.get(f"{AT}.cliconsummation"), "mimic_cxr": W.get(f"{AT}.mimic_cxr")}
    if not any(_sources.values()):
        raise WiringError("attribution: name the items to summarise: items (a JSONL), cliconsummation or mimic_cxr (folders)")
    W.step("attribution_inputs", family=AT, inputs=_sources, files={"source_items": "items"})
    _items = W.out("attribution_inputs", "source_items")
    _generated = {"generations": W.out("generate_attributed", "generations"), "source_items": _items}
    W.step("generate_attributed", family=AT, inputs={"source_items": _items})
    W.step("attribute_attention", family=AT, inputs={"generations": W.out("generate_attributed", "generations")})
    W.step("attribute_embedding", family=AT, inputs=_generated)
    W.step("attribute_self", family=AT, inputs=_generated)
    W.step("attribution_references", family=AT, inputs=_generated)
    W.step("score_attribution", family=AT, files={"report": "report.md"},
           inputs={**_generated, "citations": W.out(["attribute_attention", "attribute_embedding", "attribute_self"], "citations"),
                   "references": W.out("attribution_references", "references")},
           reports={"report": {"category": "attribution", "subcategory": "evaluation"}})
    W.evaluations.append(W.steps["score_attribution"].output("report"))

    # MCiteBench's attention analyses (mcitebench.txt §5.3 Figures 6-7) on the first model's responses
    if W.get(f"{AT}.mcitebench_attention.enabled", False) and "generate_answers" in W.steps:
        _shown = {"category": "mcitebench", "subcategory": "attention"}
        W.step("mcitebench_attention", family=AT, inputs={"responses": W.steps["generate_answers"].pattern("responses").format(m="00000")},
               files={"report": "report.md", "plot_modality": "figure6.png", "plot_map": "figure7.png"},
               reports={"report": _shown, "plot_modality": _shown, "plot_map": _shown})
        W.evaluations.append(W.steps["mcitebench_attention"].output("report"))

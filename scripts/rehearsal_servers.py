"""Local stand-ins of every model endpoint a recipe calls, for a rehearsal of the real recipe.

    python scripts/rehearsal_servers.py --configfile config/config.yaml --configfile config/recipe_real.yaml \
        [--port-base 18000] [--latency-scale 0] [--serve-in-process] \
        [--map-out rehearsal/endpoints.json] [--overlay-out rehearsal/endpoints.yaml] [--counts-out rehearsal/counts.json]

It reads the merged recipe (the --configfile files merged as Snakemake merges them) and finds every
model role: the run-wide `llm:` section and every `llm` / `vision_llm` override below it (a stage's
model, an evaluated model, a judge; a `judge:` mapping without a `name` is itself an override, as
mavis.filter_visual_dependency.judge). Each role's settings are the model layer's own merge
(stages.core.llm.settings.llm_settings). Then it starts, on 127.0.0.1, one OpenAI-compatible
server per distinct endpoint (an openai-backend role's base_url); with --serve-in-process also one
per model of the in-process backends (vllm, llamacpp), as `vllm serve <model>` would stand in for
them. Ports are --port-base, +1, ... in order of first appearance (0: any free port).

What a stand-in does, as the real server would where it matters to the pipeline:
- POST <path>/chat/completions with a model the recipe gives a role at this endpoint; another model
  is HTTP 404 in the real API's error shape (OpenAI's for hosted APIs, vLLM's for local servers).
  GET <path>/models lists the endpoint's models.
- A hosted endpoint (its roles name an api_key_env) wants `Authorization: Bearer
  rehearsal-<that variable's name>` (the map's `env` says what to export), else HTTP 401: a role
  that sends another endpoint's key is caught. A local server takes any key, as `vllm serve`.
- A hosted endpoint refuses, with HTTP 400, a `response_format` its API does not take: JSON mode
  (`json_object`) with any key besides its type, or without the word "json" in the messages.
- Image parts are accepted by a vision model and refused with HTTP 400 by a text-only one (a model
  is a vision model when its name says so: VISION below, or --vision / --text-only).
- The answer is deterministic (seeded by a hash of the request body) and valid for its prompt. The
  prompt is recognised by its template's fixed lines (prompts/*.md). JSON prompts: a minimal
  instance of the answer schema (the request's json_schema response format, else the prompt's
  schema under schemas/answers/), values picked by the hash. Yes/no prompts: "yes" or "no", with top
  log-probabilities when asked (logprobs / top_logprobs). Text prompts: the format the prompt asks
  for, read from the request (CiteEval's XML tags per sentence id, MAVIS's quoted search queries,
  "[k]" citations of the numbered documents, M2RAG's image placeholders, a letter A-E), else prose;
  JSON whose numbers point into the request reads them from it (MCiteBench's cited answer spans,
  M2RAG's image placements).
- A Qwen3 model thinks first, as its chat template does: the answer starts with a <think> block
  unless the request says `chat_template_kwargs: {enable_thinking: false}` (vLLM's extra body).
- max_tokens cuts the answer (finish_reason "length"); usage counts prompt and completion tokens
  (words and punctuation, plus 85 per image); a latency of 0.25 s + 10 ms per completion token,
  times --latency-scale (0: answers at once).

It writes the endpoint map (--map-out, and stdout): per stand-in its URL, the recipe's endpoint,
models and flavour; per role its path, backend, model, the recipe's base_url and its stand-in's URL;
the key variables to export. --overlay-out writes a config overlay pointing every role at its
stand-in (base_url; backend openai for in-process roles). --counts-out is rewritten after every
call: per stand-in, per model, per recognised prompt, the calls seen (and the refused ones under
"refused"). It runs until SIGINT / SIGTERM.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.core.llm.settings import llm_settings  # noqa: E402
from stages.core.prompts import PROMPTS_DIR, PromptLibrary  # noqa: E402

# model names that see images (the real servers decide by the model; this is the stand-in's table)
VISION = re.compile(r"vl\b|-vl-|vision|llava|internvl|minicpm-v|gpt-4o|gpt-4\.1|gpt-5|claude|gemini|pixtral|idefics|omni", re.I)
THINKING = re.compile(r"qwen3", re.I)  # hybrid-thinking chat templates: <think> unless enable_thinking is false
HOSTED = re.compile(r"(^|\.)(openai\.com|deepseek\.com|anthropic\.com|googleapis\.com)$")
TOKEN = re.compile(r"\w+|[^\w\s]")
IMAGE_TOKENS = 85
LATENCY_S, PER_TOKEN_S = 0.25, 0.010


# ---- the recipe's roles --------------------------------------------------------------------------
@dataclass
class Role:
    path: str  # where the override sits in the config, e.g. mavis.filter_visual_dependency.answerers[1].llm
    settings: dict  # the model layer's merged settings
    stand_in: str | None = None

    @property
    def backend(self) -> str:
        return self.settings["backend"]

    @property
    def model(self) -> str:
        return self.settings["model"]

    @property
    def endpoint(self) -> str:
        """The recipe's base_url, or `<backend>:<model>` for an in-process backend."""
        if self.backend == "openai":
            return self.settings["openai"]["base_url"].rstrip("/")
        return f"{self.backend}:{self.model}"


def load_recipe(configfiles: list[str]) -> dict:
    """The --configfile files merged as Snakemake merges them (nested mappings updated, the rest replaced)."""
    from snakemake.utils import update_config

    config: dict = {}
    for path in configfiles:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    return config


def find_roles(config: dict) -> list[Role]:
    base = config.get("llm") or {}
    roles = [Role("llm", llm_settings(base))]

    def walk(node, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}" if path else key
                if isinstance(value, dict) and (key in ("llm", "vision_llm") or (key == "judge" and "name" not in value)) and path:
                    roles.append(Role(here, llm_settings(base, value)))
                else:
                    walk(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk({k: v for k, v in config.items() if k != "llm"}, "")
    return roles


# ---- answers ---------------------------------------------------------------------------------------
def tokens(text: str) -> int:
    return len(TOKEN.findall(text))


def cut(text: str, max_tokens: int) -> tuple[str, str]:
    """The text cut after max_tokens tokens, and the finish reason."""
    spans = [m.end() for m in TOKEN.finditer(text)]
    if len(spans) <= max_tokens:
        return text, "stop"
    return text[: spans[max_tokens - 1]], "length"


class Seeded:
    """Deterministic choices from a request hash."""

    def __init__(self, digest: bytes):
        self.digest, self.n = digest, 0

    def int(self, k: int) -> int:
        self.n += 1
        return int.from_bytes(hashlib.sha256(self.digest + self.n.to_bytes(4, "big")).digest()[:8], "big") % max(k, 1)

    def pick(self, options: list):
        return options[self.int(len(options))]

    def words(self, n: int = 6) -> str:
        vocab = ["the", "sample", "shows", "a", "clear", "pattern", "light", "water", "growth", "signal", "result", "model",
                 "answer", "layer", "surface", "change", "cause", "effect", "value", "source"]
        return " ".join(self.pick(vocab) for _ in range(n))

    def sentence(self) -> str:
        text = self.words(self.int(5) + 5)
        return text[0].upper() + text[1:] + "."


def schema_instance(schema: dict, rng: Seeded, root: dict | None = None):
    """A small instance that satisfies `schema` (the subset of JSON Schema the answer schemas use)."""
    root = root or schema
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        return schema_instance(node, rng, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.pick(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return schema_instance(rng.pick(schema[key]), rng, root)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: schema_instance(properties.get(name, {}), rng, root) for name in schema.get("required", [])}
    if kind == "array":  # one to three items where the schema allows: a list a stage keeps part of still has rows after
        lowest, highest = schema.get("minItems", 0), min(schema.get("maxItems", 3), 3)
        n = max(lowest, min(1, highest) + rng.int(max(highest - max(lowest, 1), 0) + 1))
        items: list = []
        for _ in range(10 * n):  # distinct draws where the items must be unique
            item = schema_instance(schema.get("items", {}), rng, root)
            if not schema.get("uniqueItems") or item not in items:
                items.append(item)
            if len(items) == n:
                break
        return items
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        high = schema.get("maximum", low + 10)
        value = low + rng.int(min(high - low, 10) + 1)  # small numbers: sentence and segment numbers stay in range
        return value if kind == "integer" else float(value)
    if kind == "boolean":
        return bool(rng.int(2))
    if kind == "null":
        return None
    text = rng.sentence()
    while len(text) < schema.get("minLength", 0):
        text += " " + rng.sentence()
    return text[: schema.get("maxLength", len(text))]


def _fixed_lines(template: str) -> list[str]:
    """The lines of a prompt template that render the same in every request (15 characters or more)."""
    static = re.split(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", template, flags=re.S)
    return [line.strip() for part in static for line in part.splitlines() if len(line.strip()) >= 15]


class Prompts:
    """Recognises which prompt file a request was rendered from."""

    def __init__(self, prompts_dir: Path = PROMPTS_DIR):
        library = PromptLibrary(prompts_dir)
        self.prompts = {path.stem: library.get(path.stem) for path in sorted(Path(prompts_dir).glob("*.md"))}
        self.lines = {name: _fixed_lines(p.body) + ([p.system.strip()] if p.system else []) for name, p in self.prompts.items()}

    def identify(self, text: str) -> str | None:
        best, best_score = None, (0, 0.0)
        for name, lines in self.lines.items():
            matched = sum(len(line) for line in lines if line in text)
            score = (matched, matched / max(1, sum(len(line) for line in lines)))
            if matched and score > best_score:
                best, best_score = name, score
        return best


def _numbered(text: str) -> list[int]:
    """The document / item numbers a request shows as "[k]" at the start of a line."""
    return sorted({int(n) for n in re.findall(r"^\s*\[(\d+)\]", text, re.M)})


def _cited_prose(text: str, rng: Seeded, sentences: int = 3) -> str:
    numbers = _numbered(text) or [1]
    return " ".join(f"{rng.sentence()[:-1]} [{rng.pick(numbers)}]." for _ in range(sentences))


def _citeeval_context(text, rng):
    ids = re.findall(r'<sentence sentence_id="(\d+)">', text)
    return "\n".join(f"<thinking> Sentence {i} draws on the documents. </thinking>\n"
                     f'<category sentence_id="{i}"> {1 + rng.int(4)} </category>' for i in ids)


def _citeeval_itercoe(text, rng):
    ids = re.findall(r'<citation sentence_id="(\d+)"', text)
    return "\n".join(f"<thinking> The citations of sentence {i} are checked. </thinking>\n"
                     f'<editing sentence_id="{i}"> N/A </editing>\n<rating sentence_id="{i}"> {1 + rng.int(5)} </rating>' for i in ids)


def _mavis_queries(text, rng):
    question = re.search(r"Question:\s*(?:<image \d+>\s*)*(.+)", text)
    base = " ".join(re.findall(r"\w+", question.group(1))[:6]) if question else rng.words()
    return ", ".join(f'"{q}"' for q in (base, f"{base} explained", f"{base} photo")[: 1 + rng.int(3)])


def _m2rag_answer(text, rng):
    images = sorted({int(n) for n in re.findall(r"\(image_(\d+)\)", text)})
    parts = [rng.sentence() + " " + rng.sentence()]
    for n in images[:2]:
        parts += [f"![{rng.words(3)}](image_{n})", rng.sentence()]
    return "\n\n".join(parts)


def _letter(text, rng):
    letters = re.findall(r"^([A-E])\. ", text, re.M) or ["A"]
    return f"{rng.pick(letters)}. {rng.sentence()}"


TEXT_FORMATS = {
    "citeeval_context": _citeeval_context,
    "citeeval_itercoe": _citeeval_itercoe,
    "mavis_eval_queries": _mavis_queries,
    "mavis_eval_vanilla": _cited_prose,
    "mavis_eval_cot": lambda text, rng: f"<thinking> {rng.sentence()} </thinking>\n{_cited_prose(text, rng)}",
    "mcitebench_answer": _cited_prose,
    "mcitebench_probe_source": _letter,
    "m2rag_answer_single": _m2rag_answer,
}


REFERENCE = re.compile(r"\b(?:Section|Sec\.|Figure|Fig\.|Table|Line|Eq\.)\s*\d+(?:\.\d+)*")


def _explanation_triples(value: dict, text: str, rng: Seeded) -> dict:
    """MCiteBench Table 5: one triple per numbered response sentence that cites the paper, the span
    and its citations read from the request, valid (a random span would never hold a citation)."""
    response = text.split("# Authors' response", 1)[-1].split("# JSON Output Format", 1)[0]
    cited = [(int(n), line) for n, line in re.findall(r"^\[(\d+)\] (.*)$", response, re.M) if REFERENCE.search(line)]
    cited.sort(key=lambda c: len(set(REFERENCE.findall(c[1]))) != 1)  # single-source answers first (the probe takes only those)
    triples = value["triples"][: len(cited)]
    for triple, (n, line) in zip(triples, cited):
        triple.update(answer_from=n, answer_to=n, evidence=", ".join(REFERENCE.findall(line))[:160], valid=True)
    return {"triples": triples}


def _placements(value: dict, text: str, rng: Seeded) -> dict:
    """M2RAG's interleaving: a segment and an image that the request shows, each image once."""
    segments = _numbered(text.split("# Answer segments", 1)[-1].split("# Images", 1)[0])
    images = sorted({int(n) for n in re.findall(r"^Image (\d+):", text, re.M)})
    return {"placements": [{"segment": rng.pick(segments), "images": [rng.pick(images)]}] if segments and images else []}


def _quality_labels(value: dict, text: str, rng: Seeded) -> dict:
    """MCiteBench quality control as a mostly satisfied reviewer: relevant and clear, the evidence
    aligned three times in four (a uniform 0-2 on each criterion kept about 3 samples in 10, and
    the few single-source explanation questions the probe reads could all go)."""
    return {**value, "relevance": 2, "clarity": 2, "evidence_alignment": rng.pick([0, 2, 2, 2])}


# JSON answers that read the request (numbers pointing into it) or lean like a real judge: the
# schema's instance, then these
JSON_FORMATS = {"mcitebench_explanation_qa": _explanation_triples, "m2rag_interleave": _placements,
                "mcitebench_quality_control": _quality_labels}


def answer_text(prompt: str | None, kind: str, body: dict, text: str, rng: Seeded, library: Prompts) -> str:
    if kind == "json":
        fmt = body.get("response_format") or {}
        schema = ((fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
                  or (library.prompts[prompt].schema if prompt else {"type": "object"}))
        value = schema_instance(schema, rng)
        if prompt in JSON_FORMATS:
            value = JSON_FORMATS[prompt](value, text, rng)
        jsonschema.Draft202012Validator(schema).validate(value)  # a stand-in bug, not a model's: fail loudly
        return json.dumps(value)
    if kind == "yesno":
        return rng.pick(["yes", "no"])
    writer = TEXT_FORMATS.get(prompt or "")
    return writer(text, rng) if writer else " ".join(rng.sentence() for _ in range(3))


# ---- the servers -------------------------------------------------------------------------------------
@dataclass
class Endpoint:
    recipe_url: str  # the recipe's base_url, or <backend>:<model>
    models: set[str] = field(default_factory=set)
    key_envs: set[str] = field(default_factory=set)
    path: str = "/v1"
    flavour: str = "vllm"  # openai: a hosted API's error shapes; vllm: a local server's
    url: str = ""

    @property
    def hosted(self) -> bool:
        return self.flavour == "openai"


def error(flavour: str, status: int, message: str, kind: str, code: str) -> dict:
    if flavour == "openai":
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


class StandIns:
    """The stand-ins of one recipe; `start()` serves them in threads, `stop()` shuts them down."""

    def __init__(self, config: dict, port_base: int = 0, latency_scale: float = 1.0, serve_in_process: bool = False,
                 vision: tuple[str, ...] = (), text_only: tuple[str, ...] = (), counts_out: Path | None = None):
        self.config = config
        self.roles = find_roles(config)
        self.latency_scale = latency_scale
        self.vision, self.text_only = set(vision), set(text_only)
        self.counts_out = counts_out
        self.prompts = Prompts()
        self.endpoints: dict[str, Endpoint] = {}
        for role in self.roles:
            if role.backend != "openai" and not serve_in_process:
                continue
            endpoint = self.endpoints.setdefault(role.endpoint, Endpoint(role.endpoint))
            endpoint.models.add(role.model)
            if role.backend == "openai":
                parts = urlsplit(role.endpoint)
                endpoint.path = parts.path.rstrip("/") or ""
                endpoint.flavour = "openai" if HOSTED.search(parts.hostname or "") else "vllm"
                if role.settings["openai"].get("api_key_env"):
                    endpoint.key_envs.add(role.settings["openai"]["api_key_env"])
        self.port_base = port_base
        self.counts: dict = {}
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []

    def sees_images(self, model: str) -> bool:
        return model in self.vision or (model not in self.text_only and bool(VISION.search(model)))

    def start(self) -> "StandIns":
        for i, endpoint in enumerate(self.endpoints.values()):
            server = ThreadingHTTPServer(("127.0.0.1", self.port_base + i if self.port_base else 0), self._handler(endpoint))
            server.daemon_threads = True
            endpoint.url = f"http://127.0.0.1:{server.server_address[1]}{endpoint.path}"
            self.counts[endpoint.url] = {"recipe": endpoint.recipe_url, "models": {}, "refused": {}}
            threading.Thread(target=server.serve_forever, name=f"stand-in {endpoint.recipe_url}", daemon=True).start()
            self._servers.append(server)
        for role in self.roles:
            if role.endpoint in self.endpoints:
                role.stand_in = self.endpoints[role.endpoint].url
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> "StandIns":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what it tells the rehearsal
    def endpoint_map(self) -> dict:
        return {
            "stand_ins": [{"url": e.url, "recipe": e.recipe_url, "models": sorted(e.models), "flavour": e.flavour,
                           "key_envs": sorted(e.key_envs)} for e in self.endpoints.values()],
            "roles": [{"path": r.path, "backend": r.backend, "model": r.model,
                       "recipe_base_url": r.settings["openai"]["base_url"] if r.backend == "openai" else None,
                       "api_key_env": r.settings["openai"].get("api_key_env") if r.backend == "openai" else None,
                       "stand_in": r.stand_in} for r in self.roles],
            "env": {name: f"rehearsal-{name}" for e in self.endpoints.values() for name in sorted(e.key_envs)},
        }

    def overlay(self) -> dict:
        """A config overlay pointing every served role at its stand-in, and nothing else. A role inside
        a list carries the whole list (Snakemake replaces lists when it merges config files)."""
        out: dict = {}
        for role in self.roles:
            if role.stand_in is None:
                continue
            node, source = out, self.config
            for part in re.findall(r"[^.\[\]]+|\[\d+\]", role.path):
                if part.startswith("["):  # inside a list copied whole
                    node, source = node[int(part[1:-1])], source[int(part[1:-1])]
                    continue
                source = source.get(part, {})
                if part not in node:
                    node[part] = copy.deepcopy(source) if isinstance(source, list) else {}
                node = node[part]
            node.setdefault("openai", {})["base_url"] = role.stand_in
            if role.backend != "openai":
                node["backend"] = "openai"
                node["openai"]["api_key_env"] = None
        return out

    # -- serving
    def _count(self, url: str, where: str, model: str, prompt: str) -> None:
        with self._lock:
            by_prompt = self.counts[url][where].setdefault(model, {})
            by_prompt[prompt] = by_prompt.get(prompt, 0) + 1
            if self.counts_out:
                tmp = self.counts_out.with_suffix(".tmp")
                tmp.write_text(json.dumps(self.counts, indent=1, sort_keys=True))
                os.replace(tmp, self.counts_out)

    def _handler(self, endpoint: Endpoint):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet: the counts file is the log
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") != f"{endpoint.path}/models":
                    return self._send(404, error(endpoint.flavour, 404, f"no route {self.path}", "NotFoundError", "not_found"))
                models = [{"id": m, "object": "model", "owned_by": "rehearsal"} for m in sorted(endpoint.models)]
                self._send(200, {"object": "list", "data": models})

            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                except ValueError as err:
                    return self._send(400, error(endpoint.flavour, 400, f"the body is not JSON: {err}", "BadRequestError", "invalid_json"))
                try:
                    answer = outer._answer(endpoint, self.path, self.headers.get("Authorization", ""), body)
                except Exception as err:  # a stand-in bug, not a model's: said in the answer, not a dropped connection
                    answer = 500, error(endpoint.flavour, 500, f"rehearsal stand-in failed: {err!r}"[:2000], "InternalServerError", "stand_in_bug")
                self._send(*answer)

        return Handler

    def _answer(self, endpoint: Endpoint, path: str, authorization: str, body: dict) -> tuple[int, dict]:
        model = str(body.get("model"))
        parts = [p for m in body.get("messages") or [] for p in (m.get("content") if isinstance(m.get("content"), list)
                                                                  else [{"type": "text", "text": m.get("content") or ""}])]
        text = "\n".join(p.get("text", "") for p in parts if p.get("type") == "text")
        images = sum(1 for p in parts if p.get("type") == "image_url")
        prompt = self.prompts.identify(text)
        if path.rstrip("/") != f"{endpoint.path}/chat/completions":
            return 404, error(endpoint.flavour, 404, f"no route {path}", "NotFoundError", "not_found")
        refused = self._refusal(endpoint, authorization, model, images) or self._format_refusal(endpoint, body, text)
        if refused:
            self._count(endpoint.url, "refused", model, f"{refused[0]} {prompt or '(unrecognised)'}")
            return refused
        self._count(endpoint.url, "models", model, prompt or "(unrecognised)")
        return 200, self._completion(model, body, text, images, prompt)

    def _refusal(self, endpoint: Endpoint, authorization: str, model: str, images: int) -> tuple[int, dict] | None:
        """What the real server answers a request it refuses: a wrong key, an unknown model, images
        sent to a text-only model."""
        hosted, flavour = endpoint.hosted, endpoint.flavour
        if hosted and authorization not in {f"Bearer rehearsal-{name}" for name in endpoint.key_envs}:
            return 401, error(flavour, 401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        if model not in endpoint.models:
            message = f"The model `{model}` does not exist" + (" or you do not have access to it." if hosted else ".")
            return 404, error(flavour, 404, message, "invalid_request_error" if hosted else "NotFoundError", "model_not_found")
        if images and not self.sees_images(model):
            return 400, error(flavour, 400, f"{model} is not a multimodal model: image_url content is not supported.",
                              "invalid_request_error" if hosted else "BadRequestError", "invalid_value")
        return None

    @staticmethod
    def _format_refusal(endpoint: Endpoint, body: dict, text: str) -> tuple[int, dict] | None:
        """A hosted API's JSON mode takes its type alone, and messages that ask for JSON."""
        fmt = body.get("response_format")
        if not endpoint.hosted or not isinstance(fmt, dict) or fmt.get("type") != "json_object":
            return None
        if set(fmt) != {"type"}:
            extra = ", ".join(repr(k) for k in sorted(set(fmt) - {"type"}))
            message = f"Invalid value for 'response_format': additional properties are not allowed ({extra} unexpected)."
        elif "json" not in text.lower():
            message = "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
        else:
            return None
        return 400, error(endpoint.flavour, 400, message, "invalid_request_error", "invalid_value")

    def _completion(self, model: str, body: dict, text: str, images: int, prompt: str | None) -> dict:
        """A chat completion for the request: its prompt's answer, a thinking block first where the
        model's template thinks, cut at max_tokens, with log-probabilities when asked."""
        kinds = {"json": bool(body.get("response_format")), "yesno": bool(body.get("logprobs"))}
        kind = next((k for k, asked in kinds.items() if asked), self.prompts.prompts[prompt].kind if prompt else "text")
        rng = Seeded(hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest())
        answer = answer_text(prompt, kind, body, text, rng, self.prompts)
        if THINKING.search(model) and (body.get("chat_template_kwargs") or {}).get("enable_thinking", True):
            answer = f"<think>\n{rng.sentence()} {rng.sentence()}\n</think>\n\n{answer}"
        answer, finish = cut(answer, int(body.get("max_tokens") or 4096))
        choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish, "logprobs": None}
        if body.get("logprobs"):
            first = TOKEN.findall(answer)[0] if answer else ""
            chosen = 0.5 + 0.45 * rng.int(1000) / 999  # the probability of the token the answer starts with
            p_yes = chosen if first == "yes" else 1 - chosen
            top = [{"token": "yes", "logprob": math.log(p_yes)}, {"token": "no", "logprob": math.log(1 - p_yes)}] \
                if first in ("yes", "no") else [{"token": first, "logprob": 0.0}]
            top = top[: int(body.get("top_logprobs") or 1)]
            choice["logprobs"] = {"content": [{"token": first, "logprob": max(t["logprob"] for t in top), "top_logprobs": top}]}
        prompt_tokens, completion = tokens(text) + IMAGE_TOKENS * images, tokens(answer)
        if self.latency_scale:
            time.sleep(self.latency_scale * (LATENCY_S + PER_TOKEN_S * completion))
        return {"id": f"chatcmpl-{rng.digest.hex()[:24]}", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [choice], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                               "total_tokens": prompt_tokens + completion}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", action="append", required=True, help="config files, merged in order (as Snakemake)")
    parser.add_argument("--port-base", type=int, default=0, help="first port; the stand-ins take consecutive ports (0: any free port)")
    parser.add_argument("--latency-scale", type=float, default=1.0, help="times the realistic latency (0: answer at once)")
    parser.add_argument("--serve-in-process", action="store_true", help="also stand in for the vllm / llamacpp roles' models")
    parser.add_argument("--vision", action="append", default=[], help="a model that sees images (beyond the name rule)")
    parser.add_argument("--text-only", action="append", default=[], help="a model that takes no images (beyond the name rule)")
    parser.add_argument("--map-out", type=Path, help="write the endpoint map here (JSON)")
    parser.add_argument("--overlay-out", type=Path, help="write a config overlay pointing every role at its stand-in (YAML)")
    parser.add_argument("--counts-out", type=Path, help="calls seen per stand-in, model and prompt (JSON, rewritten per call)")
    args = parser.parse_args(argv)
    config = load_recipe(args.configfile)
    stand_ins = StandIns(config, args.port_base, args.latency_scale, args.serve_in_process, tuple(args.vision),
                         tuple(args.text_only), args.counts_out).start()
    endpoint_map = stand_ins.endpoint_map()
    for path, text in ((args.map_out, json.dumps(endpoint_map, indent=1)), (args.overlay_out, yaml.safe_dump(stand_ins.overlay(), sort_keys=False))):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    print(json.dumps(endpoint_map, indent=1), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    stand_ins.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

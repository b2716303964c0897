"""Which expensive calls the tests make, and how often the same one: a pytest plugin for
bench/suite_profile.py (`--calls`) that wraps the simulators, the loader, the frame read and the diagnosis,
and records each call's own CPU (its wrapped callees' counted apart), its test and a key of its inputs.

The key says when two calls did the same work: a simulation by its SimConfig, a blind family's run by
(family, scenario, requests, seed, options), a load by the bytes of the files it read (not their paths),
a pipeline run by its options (not its output path), a frame's diagnosis by the frame's arrays.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

_CALLS: list[dict] = []
_STACK: list[list[float]] = []  # each open call's [child CPU]
_TEST: list[str] = [""]


def _h(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def _file_digest(paths) -> str:  # type: ignore[no-untyped-def]
    h = hashlib.blake2b(digest_size=8)
    for p in paths if isinstance(paths, (list, tuple)) else [paths]:
        p = Path(p)
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file():
                h.update(f.name.rsplit(".", 1)[-1].encode())
                with open(f, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
    return h.hexdigest()


def _frame_digest(frame) -> str:  # type: ignore[no-untyped-def]
    h = hashlib.blake2b(digest_size=8)
    for name in ("trace", "parent", "name", "start", "dur", "instance"):
        h.update(getattr(frame, name).tobytes())
    h.update(repr((frame.names, frame.instances)).encode())
    return h.hexdigest()


def _key(kind: str, args: tuple, kwargs: dict) -> str:
    if kind == "simulate":
        return _h(args, kwargs)
    if kind in ("write_run", "generate"):
        rest = args[1:] if kind == "write_run" else args
        return _h(rest, sorted(kwargs.items()))
    if kind == "load_paths":
        paths = args[0] if args else kwargs.get("paths")
        label = args[2] if len(args) > 2 else kwargs.get("run_label")
        return _h(_file_digest(list(paths)), label)
    if kind == "run_pipeline":
        opts = args[0]
        fields = {k: v for k, v in vars(opts).items() if k not in ("out",)}
        return _h(sorted((k, repr(v)) for k, v in fields.items()))
    if kind == "diagnose_frame":
        return _h(_frame_digest(args[0]), args[1:], sorted(kwargs.items(), key=str)[:0])
    return ""


def _wrap(kind: str, where: str, fn):  # type: ignore[no-untyped-def]
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            key = _key(kind, args, kwargs)
        except Exception as exc:  # a key we cannot build: the call still runs
            key = f"?{type(exc).__name__}"
        _STACK.append([0.0])
        c = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            total = time.process_time() - c
            children = _STACK.pop()[0]
            if _STACK:
                _STACK[-1][0] += total
            _CALLS.append({"kind": kind, "where": where, "key": key, "test": _TEST[0],
                           "cpu": total - children, "incl": total})

    wrapper.__suite_calls__ = fn  # type: ignore[attr-defined]
    return wrapper


TARGETS = [
    ("simulate", "reference_pipeline.simulate.model", "simulate"),
    ("write_run", "reference_pipeline.simulate.blind", "write_run"),
    ("load_paths", "ingest.loader", "load_paths"),
    ("store_batches", "tailscope.store.duckdb.writer", "store_batches"),
    ("load_frame", "tailscope.analysis.diagnosis.load", "load_frame"),
    ("diagnose_frame", "tailscope.analysis.diagnosis.runner", "diagnose_frame"),
    ("run_pipeline", "reference_pipeline.runner", "run_pipeline"),
]


def _install() -> None:
    originals: dict[int, object] = {}
    for kind, modname, attr in TARGETS:
        try:
            mod = importlib.import_module(modname)
        except Exception:
            continue
        fn = getattr(mod, attr)
        originals[id(fn)] = _wrap(kind, modname, fn)
    # each blind family module's generate(scenario, requests, seed)
    try:
        from reference_pipeline.simulate import blind

        for name in blind.available():
            mod = blind.family(name)
            fn = getattr(mod, "generate", None)
            if callable(fn) and id(fn) not in originals:
                originals[id(fn)] = _wrap("generate", name, fn)
    except Exception:
        pass
    for mod in list(sys.modules.values()):
        if not isinstance(mod, ModuleType):
            continue
        d = getattr(mod, "__dict__", None)
        if not d:
            continue
        for k, v in list(d.items()):
            w = originals.get(id(v))
            if w is not None:
                d[k] = w


def pytest_collection_finish(session: pytest.Session) -> None:
    _install()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):  # type: ignore[no-untyped-def]
    _TEST[0] = item.nodeid
    yield
    _TEST[0] = ""


def pytest_unconfigure(config: pytest.Config) -> None:
    out = os.environ.get("SUITE_CALLS_OUT")
    if out:
        Path(out).write_text(json.dumps(_CALLS))

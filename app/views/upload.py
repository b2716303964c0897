"""Upload: load trace exports from the browser into the store, like `tailscope ingest`."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import streamlit as st

from app.components import access, data, filters, fmt, notice
from ingest.loader import LoadSummary, Progress, default_run_label, load_paths

RESULT_KEY = "upload_last_result"
LABEL_KEY = "upload_label"
SUGGESTED_KEY = "upload_label_suggested"
FORMATS = (
    "OTLP/JSON (one request, JSON lines from the Collector's file exporter, arrays), OTLP protobuf "
    "(raw TracesData or the file exporter's length-prefixed stream), Jaeger UI JSON, Zipkin v2 JSON, "
    "the OpenTelemetry SDK console exporter's JSON (Ray Serve), Triton's trace file, "
    "TorchServe's metrics log; "
    "gzip or zstd compressed or not. The format is detected from the content, not the file name."
)


def suggest_label(suggestion: str) -> None:
    """Offer a label from the file names, without overwriting one the user typed."""
    previous = st.session_state.get(SUGGESTED_KEY, "")
    if suggestion != previous:
        if st.session_state.get(LABEL_KEY, "") in ("", previous):
            st.session_state[LABEL_KEY] = suggestion
        st.session_state[SUGGESTED_KEY] = suggestion


def safe_name(name: str) -> str:
    """A file name without directories or odd characters (the uploaded name, as far as possible)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).name).strip("._") or "upload"


def summary_lines(summary: LoadSummary, tmp: str) -> tuple[list[str], str | None]:
    """One-line errors (as the CLI prints them, without the temporary folder) and a success line."""
    folder = re.compile(re.escape(tmp.rstrip("/")) + r"/\d+/")
    errors = [folder.sub("", f.error or "") for f in summary.failed]
    if not summary.spans:
        return errors, None
    loaded = len(summary.files) - len(summary.failed)
    done = (
        f"Loaded {fmt.count(summary.spans)} spans from {loaded} file{'s' if loaded != 1 else ''} into run "
        f"**{summary.run_label}** ({fmt.count(summary.traces)} traces in the run, {summary.seconds:.1f} s)."
    )
    duplicates = sum(f.duplicates for f in summary.files)
    if duplicates:
        done += f" {fmt.count(duplicates)} duplicate spans were already in the run and were skipped."
    if summary.rejected:
        reasons = "; ".join(f"{n}× {reason}" for reason, n in summary.reasons.most_common(3))
        done += f" {fmt.count(summary.rejected)} malformed records were skipped ({reasons})."
    return errors, done


def load(paths: list[Path], label: str, skip_bad: bool, progress: Progress) -> LoadSummary:
    """The files into the dashboard's store as `tailscope ingest` loads them."""
    return load_paths(paths, data.store(), label, skip_bad=skip_bad, progress=progress)


def render() -> None:
    if not access.writes_allowed():  # (not in the navigation then: this is a second lock)
        access.read_only_notice("Uploads")
        return
    st.title("Upload")
    limit_mb = int(st.get_option("server.maxUploadSize"))
    st.caption(f"{FORMATS} Up to **{limit_mb:,} MB per file**; larger exports: `tailscope ingest FILE`.")
    last = st.session_state.pop(RESULT_KEY, None)
    if last:
        for error in last["errors"]:
            st.error(error, icon=":material/error:")
        st.success(last["done"], icon=":material/check_circle:")
        st.page_link("views/overview.py", label="See it on the Overview", icon=":material/dashboard:")
    files = st.file_uploader(
        "Trace exports",
        accept_multiple_files=True,
        key="upload_files",
        help="Several files go into one run, each loaded in its own transaction.",
    )
    names = [f.name for f in files or []]
    suggest_label(default_run_label(names) if names else "")
    label = st.text_input(
        "Run label",
        key=LABEL_KEY,
        placeholder="e.g. prod-2026-11-21 or gpu-bf16",
        help="Files loaded under an existing label are added to that run (duplicate spans are skipped).",
    ).strip()
    skip_bad = st.checkbox(
        "Skip malformed records instead of rejecting their file",
        help="Strict by default: one bad record rejects its whole file and the store stays unchanged for it.",
    )
    if not st.button("Load into the store", type="primary", disabled=not files, icon=":material/upload:"):
        if not files:
            st.info(
                "Choose one or more files above, then load them. From a terminal the same is "
                "`tailscope ingest FILE --run LABEL`.",
                icon=":material/info:",
            )
        return
    if not label:
        st.error("Give the run a label.")
        return
    with tempfile.TemporaryDirectory(prefix="tailscope-upload-") as tmp:
        paths = []
        for i, upload in enumerate(files or []):
            path = Path(tmp) / str(i) / safe_name(upload.name)
            path.parent.mkdir()
            path.write_bytes(upload.getbuffer())
            paths.append(path)
        bar = st.progress(0.0, text="Loading ...")

        def progress(done: int, total: int, spans: int) -> None:
            bar.progress(min(done / total, 1.0) if total else 1.0, text=f"{fmt.count(spans)} spans decoded")

        summary = load(paths, label, skip_bad, progress)
        errors, done = summary_lines(summary, tmp)
    bar.empty()
    if done:
        data.clear()
        filters.show_run_next(summary.run_label)
        st.session_state[RESULT_KEY] = {"errors": errors, "done": done}
        st.rerun()
    for error in errors:
        st.error(error, icon=":material/error:")
    if not errors:
        st.warning("The files held no spans.", icon=":material/warning:")


notice.guarded(render)

"""What a view says instead of a chart: no data yet, nothing matches, or the store is unavailable."""

from __future__ import annotations

import traceback
from collections.abc import Callable

import streamlit as st

from tailscope.store.errors import StoreBusyError, StoreError, StoreVersionError

HOW_TO_LOAD = (
    "Load traces with `tailscope ingest FILE --run LABEL` (OTLP JSON or protobuf, Jaeger, Zipkin, "
    "Triton and TorchServe logs, the OpenTelemetry console exporter), "
    "generate simulated traces of every scenario with `tailscope demo`, or use the **Upload** page."
)


def no_data(reason: str | None, hint: str | None = None) -> None:
    """An st.info box: why there is nothing to show, and what to do about it."""
    text = reason or "No requests to show."
    text = text[0].upper() + text[1:]
    if not text.endswith("."):
        text += "."
    st.info(f"{text}\n\n{hint or HOW_TO_LOAD}", icon=":material/info:")


def guarded(render: Callable[[], None]) -> None:
    """Run a view; a store problem or a bug becomes a one-line error box instead of a traceback."""
    try:
        render()
    except (StoreBusyError, StoreVersionError, StoreError) as error:  # a full disk: one line too
        st.error(str(error), icon=":material/database:")
    except Exception as error:
        st.error(f"This view failed: {type(error).__name__}: {error}", icon=":material/error:")
        with st.expander("Details for a bug report"):
            st.code("".join(traceback.format_exception(error)), language="text")

"""Column formats shared by the tables of requests (slowest traces, brushed selections)."""

from __future__ import annotations

import streamlit as st

REQUEST_COLUMNS = {
    "trace_id": st.column_config.TextColumn("trace id", width="medium"),
    "timestamp": st.column_config.DatetimeColumn("started (UTC)", format="HH:mm:ss.SSS"),
    "duration_ms": st.column_config.NumberColumn("duration", format="%.2f ms"),
    "client_duration_ms": st.column_config.NumberColumn("client-observed", format="%.2f ms"),
    "dominant_stage": st.column_config.TextColumn("dominant stage"),
    "dominant_stage_ms": st.column_config.NumberColumn("its time", format="%.2f ms"),
    "is_error": st.column_config.CheckboxColumn("error"),
    "spans": st.column_config.NumberColumn("spans", format="%d"),
    "root_span_id": None,
}

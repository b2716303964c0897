"""The tailscope dashboard: `tailscope serve` runs `streamlit run app/main.py -- --db FILE`.

This entrypoint sets the page config, draws the shared sidebar filters (kept in the URL) and hands
over to the page chosen in `st.navigation`. Pages live in app/views/, each a thin layer over the
pure functions of `tailscope.analysis`.
"""

from __future__ import annotations

import importlib.util

import streamlit as st

from app.components import data, filters, notice

st.set_page_config(page_title="tailscope", page_icon=":material/timer:", layout="wide")


def view(file: str, title: str, icon: str, url_path: str, default: bool = False) -> st.Page:
    return st.Page(
        f"views/{file}", title=title, icon=f":material/{icon}:", url_path=url_path, default=default
    )


PAGES = {
    "Latency": [
        view("overview.py", "Overview", "dashboard", "overview", default=True),
        view("waterfall.py", "Waterfall", "waterfall_chart", "waterfall"),
        view("latency_time.py", "Latency over time", "timeline", "time"),
        view("tail_vs_body.py", "Tail vs body", "compare_arrows", "tail"),
        view("traces.py", "Traces", "account_tree", "traces"),
        view("compare.py", "Compare runs", "balance", "compare"),
    ],
    "Data": [
        view("upload.py", "Upload", "upload_file", "upload"),
        view("stage_mapping.py", "Stage mapping", "rule", "mapping"),
    ],
}
# The Diagnosis page is its own module (app/views/diagnosis.py); it joins the navigation once it exists.
if importlib.util.find_spec("app.views.diagnosis") is not None:
    PAGES["Latency"].insert(5, view("diagnosis.py", "Diagnosis", "troubleshoot", "diagnosis"))

page = st.navigation(PAGES)
with st.sidebar:
    notice.guarded(filters.sidebar)
    st.caption(f"Store: `{data.db_path().name}`", help=f"{data.db_path()} (`tailscope serve --db FILE`)")
page.run()

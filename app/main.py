"""The tailscope dashboard: `tailscope serve` runs `streamlit run app/main.py -- --db FILE`.

This entrypoint sets the page config, draws the shared sidebar filters (kept in the URL) and hands
over to the page chosen in `st.navigation`. Pages live in app/views/, each a thin layer over the
pure functions of `tailscope.analysis`.
"""

from __future__ import annotations

import importlib.util

import streamlit as st

from app.components import access, data, filters, notice

st.set_page_config(page_title="tailscope", page_icon=":material/timer:", layout="wide")


def view(file: str, title: str, icon: str, url_path: str) -> st.Page:
    return st.Page(f"views/{file}", title=title, icon=f":material/{icon}:", url_path=url_path)


OVERVIEW = view("overview.py", "Overview", "dashboard", "overview")


def open_overview() -> None:
    """`/` opens the Overview at its own URL, `/overview`, keeping the query string (the filters):
    Streamlit serves a default page only at `/`, so every page, the first included, is a
    non-default page with its own URL, and a link pasted into a ticket opens the same view."""
    st.switch_page(OVERVIEW, query_params={name: st.query_params.get_all(name) for name in st.query_params})


HOME = st.Page(open_overview, title="tailscope", url_path="home", default=True, visibility="hidden")


PAGES = {
    "Latency": [
        HOME,
        OVERVIEW,
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
if not access.writes_allowed():  # read-only: no Upload page at all (its URL finds no page)
    PAGES["Data"] = [page for page in PAGES["Data"] if page.url_path != "upload"]
# The Diagnosis page is its own module (app/views/diagnosis.py); it joins the navigation once it exists.
if importlib.util.find_spec("app.views.diagnosis") is not None:
    PAGES["Latency"].insert(5, view("diagnosis.py", "Diagnosis", "troubleshoot", "diagnosis"))

logged_in = access.is_logged_in()
page = st.navigation(PAGES, position="sidebar" if logged_in else "hidden")  # (the URL's page, kept for later)
if not logged_in:
    access.login_form_and_stop()
if page is HOME:
    open_overview()
with st.sidebar:
    notice.guarded(filters.sidebar)
    shown = data.short_name()
    st.caption(f"Store: `{shown}`", help=f"{data.where()} (`tailscope serve --db FILE` or `--store URL`)")
    access.sidebar_status()
page.run()

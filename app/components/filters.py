"""The shared sidebar filters (run, service, route, time window), kept in the URL's query string.

The URL is the source of truth when a session starts (a shared link opens on the same view);
afterwards the widgets' state is, and every rerun writes it back to `st.query_params`, so the
address bar always holds a link to what is on screen, on every page.
"""

from __future__ import annotations

from datetime import timedelta

import streamlit as st

from app.components import data
from tailscope import analysis
from tailscope.analysis import DEFAULT_LATENCY_TARGET_MS, Filter

ALL = "(all)"
# query parameter -> session_state key of its widget
PARAMS = {"run": "f_run", "service": "f_service", "route": "f_route", "t0": "f_t0", "t1": "f_t1"}
FILTER_KEY = "tailscope_filter"
PENDING_RUN = "tailscope_pending_run"


def _from_url(param: str, options: list[str], default: str) -> None:
    """Seed a select widget's state from the URL once per session (when the value is valid)."""
    key = PARAMS[param]
    if key in st.session_state and st.session_state[key] in options:
        return
    wanted = st.query_params.get(param)
    st.session_state[key] = wanted if wanted in options else default


def _float_param(name: str) -> float | None:
    try:
        return float(st.query_params.get(name, ""))
    except ValueError:
        return None


def sidebar() -> Filter:
    """Draw the filters in the sidebar and return the Filter they describe."""
    options = data.get(analysis.filter_options)
    runs = options.get("runs", [])
    bar = st.sidebar
    bar.markdown("**Filters**")
    if not runs:
        bar.caption("No runs loaded yet.")
        st.query_params.clear()
        flt = Filter()
        st.session_state[FILTER_KEY] = flt
        return flt

    run_options = runs if len(runs) == 1 else [ALL, *runs]
    pending = st.session_state.pop(PENDING_RUN, None)
    if pending in run_options:
        st.session_state[PARAMS["run"]] = pending
    _from_url("run", run_options, runs[-1] if len(runs) > 1 else runs[0])
    run_choice = bar.selectbox("Run", run_options, key=PARAMS["run"], help="Which loaded run to look at.")
    run = None if run_choice == ALL else run_choice

    scoped = data.get(analysis.filter_options, run) if run else options
    services = [ALL, *scoped.get("services", [])]
    routes = [ALL, *scoped.get("routes", [])]
    _from_url("service", services, ALL)
    _from_url("route", routes, ALL)
    service_choice = bar.selectbox("Service", services, key=PARAMS["service"])
    route_choice = bar.selectbox("Route", routes, key=PARAMS["route"])
    service = None if service_choice == ALL else service_choice
    route = None if route_choice == ALL else route_choice

    start = end = None
    t0 = t1 = None
    span = data.get(analysis.time_range, Filter(run=run, service=service, route=route))
    if span is not None:
        first, last = span
        length = max((last - first).total_seconds(), 0.0)
        if length >= 1.0:
            whole = (0.0, round(length + 0.5, 1))
            key = PARAMS["t0"]
            if key not in st.session_state or st.session_state.get("f_span") != whole:
                lo = _float_param("t0") if "f_span" not in st.session_state else None
                hi = _float_param("t1") if "f_span" not in st.session_state else None
                lo = min(max(lo if lo is not None else 0.0, 0.0), whole[1])
                hi = min(max(hi if hi is not None else whole[1], lo), whole[1])
                st.session_state[key] = (lo, hi)
                st.session_state["f_span"] = whole
            t0, t1 = bar.slider(
                "Time window (s since the first request)",
                min_value=whole[0],
                max_value=whole[1],
                step=0.1 if whole[1] < 60 else 1.0,
                key=key,
                help="Only requests that started inside this window count.",
            )
            if (t0, t1) != whole:
                start = first + timedelta(seconds=t0)
                end = first + timedelta(seconds=t1)
            else:
                t0 = t1 = None

    flt = Filter(run=run, service=service, route=route, start=start, end=end)
    st.session_state[FILTER_KEY] = flt
    _to_url(run_choice, service_choice, route_choice, t0, t1)
    return flt


def _to_url(run: str, service: str, route: str, t0: float | None, t1: float | None) -> None:
    wanted = {"run": run, "service": service, "route": route}
    if t0 is not None and t1 is not None:
        wanted |= {"t0": f"{t0:g}", "t1": f"{t1:g}"}
    wanted = {k: v for k, v in wanted.items() if v != ALL}
    for name in PARAMS:
        if name not in wanted and name in st.query_params:
            del st.query_params[name]
    for name, value in wanted.items():
        if st.query_params.get(name) != value:
            st.query_params[name] = value


def keep_in_url(name: str, value: str, default: str) -> None:
    """A page's own setting in the URL (?band=p90), left out while it has its default value."""
    if value == default:
        if name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get(name) != value:
        st.query_params[name] = value


TARGET_KEY = "latency_target_ms"  # the Overview's p99 target, read by the what-if section too


def latency_target() -> float:
    """The p99 target in ms the session holds: ?target= in the URL at first, else the default."""
    if TARGET_KEY not in st.session_state:
        try:
            st.session_state[TARGET_KEY] = max(float(st.query_params.get("target", "")), 0.1)
        except ValueError:
            st.session_state[TARGET_KEY] = DEFAULT_LATENCY_TARGET_MS
    return float(st.session_state[TARGET_KEY])


def current() -> Filter:
    """The Filter the sidebar set on this rerun (views call this)."""
    return st.session_state.get(FILTER_KEY, Filter())


def show_run_next(run: str) -> None:
    """Make `run` the sidebar's run on the next rerun (e.g. right after it was uploaded)."""
    st.session_state[PENDING_RUN] = run

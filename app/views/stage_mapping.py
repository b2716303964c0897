"""Stage mapping: the ordered rules that give spans their stage (editable) and the mapping in force."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from app.components import access, data, filters, fmt, notice
from app.components.rules import phase_rules_frame, phase_rules_from_frame, rules_frame, rules_from_frame
from ingest.columns import SPAN_KINDS
from tailscope import analysis
from tailscope.analysis.phases import SOURCES, UNITS
from tailscope.vocabulary import ALL_STAGES, STAGE_ATTRIBUTE

MESSAGE_KEY = "mapping_message"


def _progress_bar(doing: str):
    """A progress bar the re-derive of every run moves (a 100 M-span store takes minutes), as the
    Diagnosis page's: (fraction of the store's spans derived, which run and how far)."""
    bar = st.progress(0.0, text=f"{doing} ...")

    def progress(fraction: float, step: str) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=f"{doing}: {step}")

    return progress


@dataclass(frozen=True)
class _Rules:
    """What the stage rules' and the phase rules' editors differ in."""

    key: str  # of the form and the editor
    noun: str
    listing: Callable[..., list]
    frame: Callable[[list], pd.DataFrame]
    from_frame: Callable[[pd.DataFrame], list]
    validate: Callable[..., list[str]]
    save: Callable[..., object]
    defaults: Callable[[], list]
    reset_label: str
    recomputing: str  # what a save recomputes, as the progress bar says it
    recomputed: str  # ... and as the message after it says it


def _save(kind: _Rules, rules: list) -> None:
    """Validate, store and recompute, then rerun with a message."""
    store = data.store()
    problems = kind.validate(store, rules)
    if problems:
        st.error("Not saved. " + " ".join(problems), icon=":material/error:")
        return
    kind.save(store, rules, _progress_bar("Saving and recomputing every run's stages"))
    data.clear()
    st.session_state[MESSAGE_KEY] = f"Saved {len(rules)} {kind.noun}; every run's stages were recomputed."
    st.rerun()


def _editor(kind: _Rules, column_config: dict) -> None:
    """The rules in force as a table; where writes are allowed, editable, checked, saved or reset."""
    rules = data.get(kind.listing)
    if not access.writes_allowed():
        st.dataframe(kind.frame(rules), hide_index=True)
        return
    with st.form(f"{kind.key}_form", border=False):
        edited = st.data_editor(
            kind.frame(rules),
            key=f"{kind.key}_editor",
            num_rows="dynamic",
            hide_index=True,
            column_config={
                "order": st.column_config.NumberColumn("order", min_value=0.0, step=0.5, width="small"),
                **column_config,
            },
        )
        cols = st.columns([1.6, 1, 3])
        submitted = cols[0].form_submit_button("Save and recompute", type="primary", icon=":material/save:")
        checked = cols[1].form_submit_button("Check only", icon=":material/rule:")
    if checked:
        proposed = kind.from_frame(edited)
        problems = kind.validate(data.store(), proposed)
        if problems:
            st.error(" ".join(problems), icon=":material/error:")
        else:
            st.success(f"{len(proposed)} {kind.noun}, all valid. Nothing saved yet.", icon=":material/check:")
    elif submitted:
        _save(kind, kind.from_frame(edited))
    with st.popover(f"Reset to the default {kind.noun}", icon=":material/restart_alt:"):
        st.write(f"This replaces every {kind.noun[:-1]} with the defaults and recomputes every run.")
        if st.button(kind.reset_label, type="primary"):
            progress = _progress_bar(f"Restoring the default {kind.noun} and recomputing {kind.recomputing}")
            kind.save(data.store(), kind.defaults(), progress)
            data.clear()
            st.session_state[MESSAGE_KEY] = f"The default {kind.noun} are back; {kind.recomputed}."
            st.rerun()


STAGE_RULES = _Rules(
    "rules",
    "rules",
    analysis.list_rules,
    rules_frame,
    rules_from_frame,
    analysis.validate_rules,
    analysis.save_rules,
    analysis.default_rules,
    "Reset",
    "every run's stages",
    "every run's stages were recomputed",
)
PHASE_RULES = _Rules(
    "phase_rules",
    "phase rules",
    analysis.list_phase_rules,
    phase_rules_frame,
    phase_rules_from_frame,
    analysis.validate_phase_rules,
    analysis.save_phase_rules,
    analysis.default_phase_rules,
    "Reset phases",
    "every run",
    "every run was recomputed",
)


def rules_editor() -> None:
    st.subheader("Rules in force")
    st.caption(
        f"First match wins. Before any rule, a span's own `{STAGE_ATTRIBUTE}` attribute decides, and the "
        "request root is `ingress` (its self time shows as `unattributed`); a span no rule matches takes its "
        "parent's stage. Regexes are RE2, case-insensitive, matched anywhere unless anchored; the attribute "
        "regex is matched against each attribute written as `key=value`. Change `order` to move a rule (1.5 "
        "goes between 1 and 2); saving renumbers them."
    )
    _editor(
        STAGE_RULES,
        {
            "stage": st.column_config.SelectboxColumn("stage", options=list(ALL_STAGES), required=True),
            "span_kind": st.column_config.SelectboxColumn("span kind", options=list(SPAN_KINDS)),
            "name_regex": st.column_config.TextColumn("span name regex"),
            "attribute_regex": st.column_config.TextColumn("attribute regex (key=value)"),
            "description": st.column_config.TextColumn("why", width="large"),
        },
    )


def phase_rules_editor() -> None:
    st.subheader("Serving framework phases")
    st.caption(
        "A serving framework often reports where a request's time went on one span: vLLM as "
        "`gen_ai.latency.*` durations, Triton as timestamped events, TGI as duration fields. Each rule "
        "turns one such phase into a child interval of that span with the given stage, shown in the trace "
        "timeline under the phase's name; what the framework does not account for stays with the span. "
        "`attribute` rules: `start key` holds the duration in `unit` (`text` reads values such as "
        "`12.5ms`), one framework's phases are laid end to end from the span's start, or placed so that a "
        "phase with an `end key` ends at that offset from the span's start. `events` rules: the phase "
        "runs from the first `start key` event to the first `end key` event."
    )
    _editor(
        PHASE_RULES,
        {
            "framework": st.column_config.TextColumn("framework", required=True),
            "phase": st.column_config.TextColumn("phase", required=True),
            "stage": st.column_config.SelectboxColumn("stage", options=list(ALL_STAGES), required=True),
            "source": st.column_config.SelectboxColumn("source", options=list(SOURCES), required=True),
            "start_key": st.column_config.TextColumn("start key (attribute or event)", required=True),
            "end_key": st.column_config.TextColumn("end key (event, or end offset)"),
            "unit": st.column_config.SelectboxColumn("unit", options=list(UNITS)),
            "name_regex": st.column_config.TextColumn("span name regex"),
            "description": st.column_config.TextColumn("what it is", width="large"),
        },
    )


def mapping_table() -> None:
    flt = filters.current()
    st.subheader("Span name → stage, as mapped now")
    scope = f"run `{flt.run}`" if flt.run else "every run"
    mapping = data.get(analysis.stage_mapping, flt.run)
    if mapping.empty:
        notice.no_data("No spans are loaded yet, so there is no mapping to show")
        return
    st.caption(f"For {scope}, most frequent first; `rule` says which rule decided.")
    st.dataframe(
        mapping,
        hide_index=True,
        column_config={"spans": st.column_config.NumberColumn("spans", format="%d")},
    )
    st.caption(
        f"{fmt.count(int(mapping['spans'].sum()))} spans in {fmt.count(len(mapping))} name/kind pairs."
    )


def render() -> None:
    st.title("Stage mapping")
    message = st.session_state.pop(MESSAGE_KEY, None)
    if message:
        st.success(message, icon=":material/check_circle:")
    if not access.writes_allowed():
        access.read_only_notice("The stage rules and phase rules")
    rules_editor()
    phase_rules_editor()
    mapping_table()


notice.guarded(render)

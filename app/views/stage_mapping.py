"""Stage mapping: the ordered rules that give spans their stage (editable) and the mapping in force."""

from __future__ import annotations

import streamlit as st

from app.components import access, data, filters, fmt, notice
from app.components.rules import phase_rules_frame, phase_rules_from_frame, rules_frame, rules_from_frame
from ingest.columns import SPAN_KINDS
from tailscope import analysis
from tailscope.analysis import PhaseRule, StageRule
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


def _save(rules: list, validate, store_rules, noun: str) -> None:
    """Validate, store and recompute (stage rules or phase rules: `store_rules(store, rules)`), then
    rerun with a message."""
    store = data.store()
    problems = validate(store, rules)
    if problems:
        st.error("Not saved. " + " ".join(problems), icon=":material/error:")
        return
    store_rules(store, rules, _progress_bar("Saving and recomputing every run's stages"))
    data.clear()
    st.session_state[MESSAGE_KEY] = f"Saved {len(rules)} {noun}; every run's stages were recomputed."
    st.rerun()


def save(rules: list[StageRule]) -> None:
    _save(rules, analysis.validate_rules, analysis.save_rules, "rules")


def reset() -> None:
    progress = _progress_bar("Restoring the default rules and recomputing every run's stages")
    analysis.save_rules(data.store(), analysis.default_rules(), progress)
    data.clear()
    st.session_state[MESSAGE_KEY] = "The default rules are back; every run's stages were recomputed."
    st.rerun()


def rules_editor() -> None:
    st.subheader("Rules in force")
    st.caption(
        f"First match wins. Before any rule, a span's own `{STAGE_ATTRIBUTE}` attribute decides, and the "
        "request root is `ingress` (its self time shows as `unattributed`); a span no rule matches takes its "
        "parent's stage. Regexes are RE2, case-insensitive, matched anywhere unless anchored; the attribute "
        "regex is matched against each attribute written as `key=value`. Change `order` to move a rule (1.5 "
        "goes between 1 and 2); saving renumbers them."
    )
    rules = data.get(analysis.list_rules)
    if not access.writes_allowed():
        st.dataframe(rules_frame(rules), hide_index=True)
        return
    edited = None
    with st.form("rules_form", border=False):
        edited = st.data_editor(
            rules_frame(rules),
            key="rules_editor",
            num_rows="dynamic",
            hide_index=True,
            column_config={
                "order": st.column_config.NumberColumn("order", min_value=0.0, step=0.5, width="small"),
                "stage": st.column_config.SelectboxColumn("stage", options=list(ALL_STAGES), required=True),
                "span_kind": st.column_config.SelectboxColumn("span kind", options=list(SPAN_KINDS)),
                "name_regex": st.column_config.TextColumn("span name regex"),
                "attribute_regex": st.column_config.TextColumn("attribute regex (key=value)"),
                "description": st.column_config.TextColumn("why", width="large"),
            },
        )
        cols = st.columns([1.6, 1, 3])
        submitted = cols[0].form_submit_button("Save and recompute", type="primary", icon=":material/save:")
        checked = cols[1].form_submit_button("Check only", icon=":material/rule:")
    if submitted or checked:
        proposed = rules_from_frame(edited)
        if checked:
            problems = analysis.validate_rules(data.store(), proposed)
            if problems:
                st.error(" ".join(problems), icon=":material/error:")
            else:
                st.success(f"{len(proposed)} rules, all valid. Nothing saved yet.", icon=":material/check:")
        else:
            save(proposed)
    with st.popover("Reset to the default rules", icon=":material/restart_alt:"):
        st.write("This replaces every rule with the defaults and recomputes every run.")
        if st.button("Reset", type="primary"):
            reset()


def save_phases(rules: list[PhaseRule]) -> None:
    _save(rules, analysis.validate_phase_rules, analysis.save_phase_rules, "phase rules")


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
    rules = data.get(analysis.list_phase_rules)
    if not access.writes_allowed():
        st.dataframe(phase_rules_frame(rules), hide_index=True)
        return
    with st.form("phase_rules_form", border=False):
        edited = st.data_editor(
            phase_rules_frame(rules),
            key="phase_rules_editor",
            num_rows="dynamic",
            hide_index=True,
            column_config={
                "order": st.column_config.NumberColumn("order", min_value=0.0, step=0.5, width="small"),
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
        cols = st.columns([1.6, 1, 3])
        submitted = cols[0].form_submit_button("Save and recompute", type="primary", icon=":material/save:")
        checked = cols[1].form_submit_button("Check only", icon=":material/rule:")
    if submitted or checked:
        proposed = phase_rules_from_frame(edited)
        problems = analysis.validate_phase_rules(data.store(), proposed)
        if checked and problems:
            st.error(" ".join(problems), icon=":material/error:")
        elif checked:
            st.success(f"{len(proposed)} phase rules, all valid. Nothing saved yet.", icon=":material/check:")
        else:
            save_phases(proposed)
    with st.popover("Reset to the default phase rules", icon=":material/restart_alt:"):
        st.write("This replaces every phase rule with the defaults and recomputes every run.")
        if st.button("Reset phases", type="primary"):
            progress = _progress_bar("Restoring the default phase rules and recomputing every run")
            analysis.save_phase_rules(data.store(), analysis.default_phase_rules(), progress)
            data.clear()
            st.session_state[MESSAGE_KEY] = "The default phase rules are back; every run was recomputed."
            st.rerun()


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

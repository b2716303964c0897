"""Who may see the dashboard and who may change the store: the settings `tailscope serve` passes.

`tailscope serve` puts them in the dashboard's environment:
- TAILSCOPE_WRITES: "1" lets visitors write (the Upload page, the rule editors' Save and Reset),
  "0" shows the dashboard read-only (no Upload page, the rules as plain tables). Read-only is
  serve's default whenever it binds an address other than loopback.
- TAILSCOPE_LOGIN: "none", "password" (a shared secret read from TAILSCOPE_PASSWORD_FILE, for
  small teams) or "oidc" (Streamlit's own `st.login`, configured in .streamlit/secrets.toml).
Without them (the dashboard started by hand with `streamlit run`) it behaves as on loopback: writes
allowed, no login.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
from collections import deque
from pathlib import Path

import streamlit as st

SESSION_KEY = "tailscope_logged_in"
FAILED_LOGINS_ALLOWED = 10  # wrong passwords per LOCKOUT_SECONDS, for the whole server
LOCKOUT_SECONDS = 60.0


def writes_allowed() -> bool:
    return os.environ.get("TAILSCOPE_WRITES", "1") != "0"


def login_kind() -> str:
    return os.environ.get("TAILSCOPE_LOGIN", "none")


class _FailedLogins:
    """Wrong passwords in the last LOCKOUT_SECONDS, shared by every session of this server: past
    FAILED_LOGINS_ALLOWED no password is even checked until the oldest failure ages out."""

    def __init__(self) -> None:
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def _recent(self) -> int:
        cutoff = time.monotonic() - LOCKOUT_SECONDS
        while self._times and self._times[0] < cutoff:
            self._times.popleft()
        return len(self._times)

    def locked(self) -> bool:
        with self._lock:
            return self._recent() >= FAILED_LOGINS_ALLOWED

    def add(self) -> None:
        with self._lock:
            self._times.append(time.monotonic())


@st.cache_resource(show_spinner=False)
def _failed_logins() -> _FailedLogins:
    return _FailedLogins()


def _shared_secret() -> str:
    from tailscope.access import read_secret_file

    return read_secret_file(Path(os.environ["TAILSCOPE_PASSWORD_FILE"]), "dashboard password")


def _password_form() -> None:
    st.title("tailscope")
    st.caption("This dashboard is shared with a password. Ask whoever runs it.")
    with st.form("login", border=False):
        given = st.text_input("Password", type="password")
        submitted = st.form_submit_button("Log in", type="primary")
    if submitted:
        failures = _failed_logins()
        if failures.locked():
            st.error(f"Too many wrong passwords: try again in {LOCKOUT_SECONDS:.0f} s.")
        elif hmac.compare_digest(given.encode("utf-8"), _shared_secret().encode("utf-8")):
            st.session_state[SESSION_KEY] = True
            st.rerun()
        else:
            failures.add()
            st.error("Wrong password.")


def _oidc_form() -> None:
    st.title("tailscope")
    st.caption("Log in with your organisation's account to see this dashboard.")
    st.button("Log in", type="primary", on_click=st.login)


def is_logged_in() -> bool:
    """Whether this browser session may see the dashboard (always, when no login is required)."""
    kind = login_kind()
    if kind == "oidc":
        return bool(st.user.is_logged_in)
    return kind == "none" or bool(st.session_state.get(SESSION_KEY))


def login_form_and_stop() -> None:
    """Draw the login (the shared password's form, or the identity provider's button) and end
    this script run: nothing of the store is shown before a login."""
    _oidc_form() if login_kind() == "oidc" else _password_form()
    st.stop()


def sidebar_status() -> None:
    """Who is logged in, a Log out button, and whether this dashboard can change the store."""
    kind = login_kind()
    if kind == "oidc":
        who = st.user.get("email") or st.user.get("name") or "logged in"
        st.caption(f"Logged in as {who}")
        st.button("Log out", on_click=st.logout, key="logout")
    elif kind == "password" and st.button("Log out", key="logout"):
        st.session_state.pop(SESSION_KEY, None)
        st.rerun()
    if not writes_allowed():
        st.caption(
            "Read-only: no Upload, rules not editable (`tailscope serve --allow-writes` to change that)."
        )


def read_only_notice(what: str) -> None:
    st.info(
        f"{what} are shown read-only: this dashboard was started without writes "
        "(`tailscope serve --allow-writes` enables them).",
        icon=":material/lock:",
    )

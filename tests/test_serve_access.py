"""`tailscope serve` shared beyond this machine (issue 30): read-only by default off loopback, a
shared-password login, Streamlit's OIDC login, and the refusal to open writes to anyone.

Browser tests drive Chromium against a real `tailscope serve --host 0.0.0.0`, reached on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from app_data import build_store
from browser_support import browser_missing, chromium, free_port, problems_on, serving_command, wait_for_app

from tailscope.cli import serve_cmd
from tailscope.cli.main import build_parser, main

PASSWORD = "correct-horse-battery-staple"
browser = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("access") / "store.duckdb", requests=60)


@pytest.fixture(scope="module")
def password_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "password"
    path.write_text(PASSWORD + "\n")
    return path


def access_of(*argv: str) -> serve_cmd.Access:
    return serve_cmd.access_from(build_parser().parse_args(["serve", *argv]))


def test_writes_are_on_by_default_on_loopback_only(password_file: Path) -> None:
    assert access_of() == serve_cmd.Access(writes=True, login="none")
    assert access_of("--host", "::1").writes
    assert access_of("--read-only").writes is False
    assert access_of("--host", "0.0.0.0") == serve_cmd.Access(writes=False, login="none")
    shared = access_of("--host", "0.0.0.0", "--allow-writes", "--password-file", str(password_file))
    assert (shared.writes, shared.login) == (True, "password")
    assert access_of("--host", "0.0.0.0", "--allow-writes", "--insecure").writes
    assert (
        shared.environment()["TAILSCOPE_WRITES"] == "1" and "TAILSCOPE_PASSWORD_FILE" in shared.environment()
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--host", "0.0.0.0", "--allow-writes"],
            "refusing to serve on 0.0.0.0 with writes allowed and no login",
        ),
        (["--password-file", "short"], "must be at least 16 characters"),
        (["--oidc"], "no [auth] section"),
    ],
)
def test_unsafe_or_unusable_access_is_refused_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "short").write_text("abc\n")
    assert main(["serve", "--db", str(tmp_path / "s.duckdb"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_oidc_needs_a_complete_auth_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    secrets = tmp_path / ".streamlit" / "secrets.toml"
    secrets.parent.mkdir()
    secrets.write_text('[auth]\nredirect_uri = "http://x/oauth2callback"\n')
    assert "lacks cookie_secret, client_id" in str(serve_cmd.oidc_problem(tmp_path))
    secrets.write_text(oidc_secrets("http://127.0.0.1:1", 8501))
    assert serve_cmd.oidc_problem(tmp_path) is None


def oidc_secrets(provider: str, port: int) -> str:
    return (
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        'cookie_secret = "a-long-random-cookie-secret-for-the-tests"\n'
        'client_id = "tailscope-test"\n'
        'client_secret = "client-secret"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n'
    )


def pages_in_navigation(page: Any) -> list[str]:
    links = page.query_selector_all('[data-testid="stSidebarNavLink"]')
    return [link.inner_text().strip().splitlines()[-1] for link in links]  # (after the icon's name)


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(chrome: Any) -> Iterator[Any]:
    context = chrome.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


@browser
@pytest.mark.browser
@pytest.mark.timeout(180)
def test_off_loopback_the_dashboard_is_read_only(store: Path, page: Any, tmp_path: Path) -> None:
    with serving_command(
        ["serve", "--db", str(store), "--host", "0.0.0.0"], log=tmp_path / "serve.log"
    ) as url:
        page.goto(f"{url}/mapping")
        wait_for_app(page)
        assert "Upload" not in pages_in_navigation(page) and "Stage mapping" in pages_in_navigation(page)
        text = page.inner_text("body")
        assert "shown read-only" in text and "Read-only: no Upload" in text
        assert page.get_by_role("button", name="Save and recompute").count() == 0
        assert page.get_by_role("button", name="Reset to the default rules").count() == 0
        assert not problems_on(page)
        page.goto(f"{url}/upload")  # no such page: nothing to upload with
        wait_for_app(page)
        assert page.query_selector('[data-testid="stFileUploaderDropzoneInput"]') is None
    assert "read-only, login: none" in (tmp_path / "serve.log").read_text()


@browser
@pytest.mark.browser
@pytest.mark.timeout(180)
def test_a_shared_password_guards_every_page(store: Path, password_file: Path, page: Any) -> None:
    argv = [
        "serve",
        "--db",
        str(store),
        "--host",
        "0.0.0.0",
        "--allow-writes",
        "--password-file",
        str(password_file),
    ]
    with serving_command(argv) as url:
        page.goto(f"{url}/waterfall")
        page.wait_for_selector("text=Log in", timeout=45_000)
        assert "Waterfall" not in page.inner_text("body") and not pages_in_navigation(page)
        page.get_by_label("Password", exact=True).fill("not-the-password")
        page.get_by_role("button", name="Log in").click()
        page.wait_for_selector("text=Wrong password.", timeout=30_000)
        page.get_by_label("Password", exact=True).fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_selector("h1:has-text('Waterfall')", timeout=45_000)
        wait_for_app(page)
        assert "Upload" in pages_in_navigation(page), "a logged-in visitor may write (--allow-writes)"
        assert not problems_on(page)


@browser
@pytest.mark.browser
@pytest.mark.timeout(180)
def test_oidc_login_goes_through_the_identity_provider_and_back(
    store: Path, page: Any, tmp_path: Path
) -> None:
    pytest.importorskip(
        "authlib", reason="Streamlit's st.login needs Authlib (pip install 'tailscope[oidc]')"
    )
    from oidc_provider import EMAIL, provider

    port = free_port()
    with provider() as (issuer, authorized):
        (tmp_path / ".streamlit").mkdir()
        (tmp_path / ".streamlit" / "secrets.toml").write_text(oidc_secrets(issuer, port))
        argv = ["serve", "--db", str(store), "--host", "0.0.0.0", "--oidc"]
        with serving_command(argv, cwd=tmp_path, port=port) as url:
            page.goto(f"{url}/overview")
            page.wait_for_selector("text=Log in with your organisation's account", timeout=45_000)
            assert not pages_in_navigation(page)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_selector(f"text=Logged in as {EMAIL}", timeout=45_000)
            wait_for_app(page)
            assert "Overview" in pages_in_navigation(page) and "Upload" not in pages_in_navigation(page)
            assert not problems_on(page)
            page.get_by_role("button", name="Log out").click()
            page.wait_for_selector("text=Log in with your organisation's account", timeout=45_000)
    request = authorized[-1]
    assert request["client_id"] == ["tailscope-test"] and request["response_type"] == ["code"]
    assert request["redirect_uri"] == [f"http://127.0.0.1:{port}/oauth2callback"]
    assert "openid" in request["scope"][0] and request.get("state") and request.get("nonce")

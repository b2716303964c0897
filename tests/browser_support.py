"""Drive the real dashboard: start `tailscope serve` on a free port, wait until Streamlit answers,
and let Playwright's Chromium (Debian's /usr/bin/chromium) load pages until their script run is over.

Used by tests/test_browser.py and scripts/screenshot.py.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO_ROOT = Path(__file__).resolve().parents[1]
# url path of each page (st.Page url_path in app/main.py) -> a word its title contains
# (the default page is served at the root, "")
PAGES = {
    "overview": "Overview",
    "waterfall": "Waterfall",
    "time": "Latency over time",
    "tail": "Tail vs body",
    "traces": "Traces",
    "compare": "Compare runs",
    "diagnosis": "Diagnosis",
    "upload": "Upload",
    "mapping": "Stage mapping",
}


def browser_missing() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (apt-get install chromium; ./test.sh does it when run as root)"
    if not installed("playwright.sync_api"):
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


def installed(module: str) -> bool:
    """Whether `module` is installed, asked without importing it (only its parent packages are): a
    module-level skip check runs in every xdist worker's collection, whether or not that worker runs the
    file (playwright's sync API ~0.16 s of CPU, FastAPI with its instrumentation ~0.75 s)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen[Any], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"`tailscope serve` exited with {process.returncode} before answering")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url}/_stcore/health did not answer within {timeout:.0f} s")


@contextmanager
def serving(db: Path | str, log: Path | None = None) -> Iterator[str]:
    """`tailscope serve --db DB --port N` (a str: `--store URL`) in the background; yields its base
    URL, stops it after."""
    with serving_command(
        ["serve", *(["--store", db] if isinstance(db, str) else ["--db", str(db)])], log
    ) as url:
        yield url


@contextmanager
def serving_command(
    args: list[str],
    log: Path | None = None,
    timeout: float = 60.0,
    cwd: Path = REPO_ROOT,
    port: int | None = None,
) -> Iterator[str]:
    """`tailscope ARGS --port N` (a command that opens the dashboard: serve, demo) in the
    background, from `cwd`; yields the dashboard's base URL once healthy, stops the command after."""
    port = port or free_port()
    command = [
        sys.executable,
        "-c",
        "from tailscope.cli.main import entrypoint; entrypoint()",
        *args,
        "--port",
        str(port),
    ]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, timeout)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def wait_for_app(page: Any, timeout_ms: int = 45_000) -> None:
    """Until Streamlit is connected, its script run is over and the charts have drawn."""
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-connection-state="CONNECTED"]', timeout=timeout_ms
    )
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout_ms)
    page.wait_for_selector("h1", timeout=timeout_ms)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=timeout_ms
    )
    page.wait_for_timeout(600)  # plotly draws after the run ends
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout_ms)


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def problems_on(page: Any) -> list[str]:
    """Exception boxes, error alerts and dialogs (Streamlit's "Page not found") on the page, as text."""
    found = []
    for selector in ('[data-testid="stException"]', '[data-testid="stAlertContentError"]', '[role="dialog"]'):
        found += [el.inner_text() for el in page.query_selector_all(selector)]
    return found


def screenshot(page: Any, path: Path, width: int = 1440) -> None:
    """The whole page: Streamlit scrolls inside its main container, so grow the viewport to fit it."""
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"], section, body')]"
        ".map(e => e.scrollHeight))"
    )
    page.set_viewport_size({"width": width, "height": max(int(height), 600)})
    page.wait_for_timeout(700)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)


# One span as an OTLP/JSON request: what the upload tests load through the page.
ONE_SPAN_OTLP_JSON = (
    b'{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"up"}}]},'
    b'"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331",'
    b'"name":"GET /","kind":2,"startTimeUnixNano":"1700000000000000000",'
    b'"endTimeUnixNano":"1700000000050000000"}]}]}]}'
)


def upload_on_page(
    page: Any, server: str, name: str, body: bytes, label: str, timeout_ms: int = 60_000
) -> None:
    """Load one file through the Upload page as a user does: choose it, set the run label, press
    the button; returns once the page says it loaded (a span count) and has settled."""
    page.goto(f"{server}/upload")
    wait_for_app(page)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
        {"name": name, "mimeType": "application/json", "buffer": body}
    )
    page.wait_for_selector(f"text={name}", timeout=30_000)
    stem = name.rsplit(".", 1)[0]
    page.wait_for_function(  # the label suggested from the file name has arrived
        f"() => document.querySelector('[data-testid=stTextInputField]')?.value === {stem!r}",
        timeout=30_000,
    )
    wait_for_app(page)
    page.get_by_label("Run label", exact=True).fill(label)
    page.get_by_label("Run label", exact=True).press("Enter")
    wait_for_app(page)
    page.get_by_role("button", name="Load into the store").click()
    page.wait_for_selector("text=Loaded", timeout=timeout_ms)
    wait_for_app(page)

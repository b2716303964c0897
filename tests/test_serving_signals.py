"""A child service stopped in the instant between announcing its port and uvicorn taking over the
signals still ends, promptly and cleanly (reference_pipeline.serving.serve)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from receiver_support import REPO_ROOT

# SIGTERM arrives after serve() set its handler and before uvicorn installs its own: the moment the
# runner may stop a child that has just printed LISTENING
EARLY_SIGTERM = textwrap.dedent(
    """
    import os, signal
    import uvicorn
    from starlette.applications import Starlette
    from reference_pipeline.serving import bind_free_port, serve

    run = uvicorn.Server.run
    def run_after_a_signal(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return run(self, *args, **kwargs)
    uvicorn.Server.run = run_after_a_signal
    serve(Starlette(), bind_free_port())
    print("SERVER ENDED", flush=True)
    """
)


def test_sigterm_before_uvicorn_takes_the_signals_still_stops_the_server() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", EARLY_SIGTERM], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        raise AssertionError(f"the signal was lost: the server kept running\n{out}") from None
    assert process.returncode == 0, out
    assert out.splitlines()[0].startswith("LISTENING ") and "SERVER ENDED" in out

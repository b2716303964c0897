"""Make the README's screenshot: the dashboard's Waterfall page on demo data -> docs/dashboard.png.

    .venv/bin/python scripts/screenshot.py                  # simulate the demo runs into a temp store
    .venv/bin/python scripts/screenshot.py --db tailscope-demo.duckdb --run demo-burst --page waterfall

Starts the real `tailscope serve` on a free port, loads the page in Debian's Chromium (Playwright),
waits for the charts, takes the top of the page and stores it as a palette PNG (a few hundred KB).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from browser_support import browser_missing, chromium, problems_on, serving, wait_for_app  # noqa: E402

DEFAULT_RUN = "demo-burst"
MAX_BYTES = 300_000


def demo_store(folder: Path, requests: int) -> Path:
    from tailscope.cli.demo_cmd import load_demo

    db = folder / "demo.duckdb"
    load_demo(db, requests, out=sys.stderr)
    return db


def shrink(png: Path, colors: int = 128) -> None:
    """Re-encode as an adaptive-palette PNG: UI screenshots lose nothing visible and a lot of bytes."""
    from PIL import Image

    with Image.open(png) as image:
        small = image.convert("RGB").quantize(
            colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.NONE
        )
        small.save(png, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="store to show (default: simulate the demo runs)")
    parser.add_argument("--run", default=DEFAULT_RUN, help=f"run to show (default {DEFAULT_RUN})")
    parser.add_argument("--page", default="waterfall", help="url path of the page (default waterfall)")
    parser.add_argument("--query", default="band=p99", help="extra query string")
    parser.add_argument("--requests", type=int, default=2000, help="simulated requests per demo run")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "dashboard.png")
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    if (reason := browser_missing()) is not None:
        print(f"screenshot: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or demo_store(Path(tmp), args.requests)
        with serving(db, log=Path(tmp) / "serve.log") as url, chromium() as browser:
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(f"{url}/{args.page}?run={args.run}&{args.query}")
            wait_for_app(page)
            problems = problems_on(page)
            if problems:
                print("screenshot: the page shows errors:\n" + "\n".join(problems), file=sys.stderr)
                return 1
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out))
    shrink(args.out)
    size = args.out.stat().st_size
    print(f"screenshot: {args.out} ({size / 1000:.0f} KB)")
    if size > MAX_BYTES:
        print(
            f"screenshot: larger than {MAX_BYTES / 1000:.0f} KB; try --height or fewer colours",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

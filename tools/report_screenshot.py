"""Screenshot a built report with the headless Chromium the browser tests use (how docs/report.png was made).

    python tools/report_screenshot.py SITE/index.html docs/report.png --open CASE@BACKEND
"""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import sync_playwright

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--open", default="", metavar="CASE@BACKEND", help="cell whose details to show")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    url = args.index.resolve().as_uri() + (f"#{quote(args.open)}" if args.open else "")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1050})
        page.goto(url)
        page.screenshot(path=str(args.png))
        browser.close()


if __name__ == "__main__":
    main()

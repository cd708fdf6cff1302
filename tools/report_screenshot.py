"""Screenshot a built report with the headless Chromium the browser tests use (how docs/report.png was made).

    python tools/report_screenshot.py SITE/index.html docs/report.png --open CASE@BACKEND \
        [--width 1280] [--height 1000] [--full-page] [--click SELECTOR]
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
    parser.add_argument("--width", type=int, default=1500, help="viewport width in CSS pixels")
    parser.add_argument("--height", type=int, default=1050, help="viewport height in CSS pixels")
    parser.add_argument("--full-page", action="store_true", help="the whole page, not the first screen")
    parser.add_argument("--click", action="append", default=[], metavar="SELECTOR",
                        help="click this first (e.g. '#expected-causes summary' to unfold the expected causes)")
    args = parser.parse_args()
    url = args.index.resolve().as_uri() + (f"#{quote(args.open)}" if args.open else "")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(url)
        for selector in args.click:
            page.click(selector)
        page.evaluate("() => scrollTo(0, 0)")  # a click scrolls: start at the top, the panel by the matrix
        page.wait_for_timeout(300)  # the charts drawn
        page.screenshot(path=str(args.png), full_page=args.full_page)
        browser.close()


if __name__ == "__main__":
    main()

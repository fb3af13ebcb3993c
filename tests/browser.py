"""Headless Chromium for the browser tests: Debian's ``chromium`` driven by Playwright for Python.

Playwright's own browser download cannot be fetched here, so it is pointed at the system
browser (``executable_path``). Where either is missing the browser tests skip, saying how to
install it -- except in CI (``CI`` set, as ``.ci/run`` does), where a missing browser fails the
test instead: a green CI means the pages were opened.
"""

from __future__ import annotations

import os
import shutil

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"browser tests required in CI but cannot run: {reason}")
    pytest.skip(f"browser test skipped: {reason}")


def chromium_path() -> str | None:
    override = os.environ.get("OSL_CHROMIUM")
    if override:
        return override
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def launch():
    """(playwright, browser): a headless Chromium; the caller closes both."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: run make bootstrap (it is in the project's test extra)")
    path = chromium_path()
    if path is None:
        _missing(
            "no Chromium found (looked for " + ", ".join(BROWSERS) + " on PATH, and OSL_CHROMIUM): "
            "apt-get install chromium (make bootstrap does it as root on Debian)"
        )
    pw = sync_playwright().start()
    try:
        # --no-sandbox: Chromium's sandbox refuses to start as root, which CI here is
        browser = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
    except Exception as exc:  # playwright's Error: say which binary and why, then fail
        pw.stop()
        pytest.fail(f"Chromium at {path} did not start under Playwright: {exc}")
    return pw, browser


def image_sizes(page) -> list[int]:
    """The natural width of every image on the page: 0 for one the browser could not decode."""
    return page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")

"""A real browser for the console tests: Playwright driving Debian's Chromium (Playwright's own
browser download cannot work on these machines)."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser(django_db_setup):
    """One Chromium per test module. Playwright's sync API runs an event loop in this thread while it
    lives; the tests' ORM calls stay synchronous, and Django refuses them next to a running loop
    unless told otherwise (for this module only)."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed: `apt-get install chromium` (./run test installs it when run as root)")
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    yield context.new_page()
    context.close()


@pytest.fixture
def screenshot(request, tmp_path):
    """``screenshot(page, name)``: a PNG of the viewport, into ``--console-screenshots`` when given."""
    folder = Path(request.config.getoption("--console-screenshots") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path))
        assert path.stat().st_size > 0
        return path

    return take

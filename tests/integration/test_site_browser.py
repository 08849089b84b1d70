"""The recipe site in a real browser: build it from the catalog, serve it on loopback, open it
in headless Chromium (Debian's /usr/bin/chromium driven by Playwright).

Checks: every recipe page loads with no console errors and no failed or off-host requests; each
launch block holds exactly what `recipe render` prints and the copy button copies that text;
each page's JSON link returns the exported document byte for byte; the index filters narrow the
list (and without JavaScript the list is complete); pages fit a phone-width screen.
Screenshots of the index and one recipe page (desktop and phone) go to test-artifacts/site/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "site"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def catalog():
    from recipekit.catalog import list_recipes

    return list_recipes()


@pytest.fixture(scope="module")
def site(tmp_path_factory, catalog):
    from recipekit.site.build import build_site

    out = tmp_path_factory.mktemp("site") / "site"
    report = build_site(out, recipes=catalog)
    return out, report


@pytest.fixture(scope="module")
def server(site):
    from recipekit.site.serve import SiteServer

    srv = SiteServer(site[0], port=0, quiet=True).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: ./start.sh test installs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # launch() gives Chromium a fresh, empty user-data-dir of its own
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watch:
    """Console errors, page errors, failed responses and requests that leave the site."""

    def __init__(self, page, base_url: str):
        self.problems: list[str] = []
        page.on(
            "console", lambda m: m.type in ("error", "warning") and self.problems.append(f"console {m.type}: {m.text}")
        )
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        # a request the browser itself cancels on navigation (the favicon, typically) is no defect
        page.on(
            "requestfailed",
            lambda r: (
                "ERR_ABORTED" in (r.failure or "") or self.problems.append(f"request failed: {r.url} {r.failure}")
            ),
        )
        page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))
        page.on(
            "request",
            lambda r: r.url.startswith((base_url, "data:")) or self.problems.append(f"off-site request: {r.url}"),
        )


def _new_page(browser, server, viewport=DESKTOP, **ctx):
    context = browser.new_context(viewport=viewport, **ctx)
    page = context.new_page()
    return context, page, Watch(page, server.base_url)


def _render(rid: str, layout: str | None, cwd: Path) -> str:
    """`recipe render` as a user runs it in a clean shell (no .env, no overriding variables)."""
    import subprocess
    import sys

    recipe = Path(sys.executable).with_name("recipe")
    args = [str(recipe), "render", rid] + (["--layout", layout] if layout else [])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode("utf-8")


def test_every_recipe_page_loads_clean_and_shows_the_render(browser, server, site, catalog, tmp_path):
    assert len(catalog) >= 1
    context, page, watch = _new_page(browser, server)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base_url.rstrip("/"))
    for lr in catalog:
        page.goto(server.base_url + f"recipes/{lr.id}/index.html", wait_until="load")
        assert page.locator("h1").inner_text() == lr.recipe.title
        blocks = page.locator(".launch")
        layouts = list(lr.recipe.layouts) or [None]
        assert blocks.count() == len(layouts)
        for i in range(blocks.count()):
            block = blocks.nth(i)
            layout = block.get_attribute("data-layout")
            want = _render(lr.id, None if layout == "default" else layout, tmp_path)
            got = block.locator("pre").evaluate("el => el.textContent")
            assert got == want, f"{lr.id} {layout}: launch block differs from `recipe render`"
            # and the recipe's JSON document carries the same text for that layout
            doc = json.loads((site[0] / "api" / "v1" / "recipes" / f"{lr.id}.json").read_bytes())
            assert want in [r["text"] for r in doc["layouts"][layout]["renders"].values()]
            button = block.locator("button.copy")
            assert button.is_visible()
            button.click()
            page.wait_for_function("b => b.dataset.state === 'done'", arg=button.element_handle())
            assert page.evaluate("navigator.clipboard.readText()") == want
        # every image loaded, every image described
        for img in page.locator("img").all():
            assert img.get_attribute("alt")
            assert img.evaluate("el => el.complete && el.naturalWidth > 0")
    assert watch.problems == []
    context.close()


def test_json_link_returns_the_exported_document(browser, server, site, catalog, tmp_path):
    from recipekit.site import sources

    sources.export_api(tmp_path, catalog)  # the export, on its own, into another folder
    context, page, watch = _new_page(browser, server)
    for lr in catalog:
        page.goto(server.base_url + f"recipes/{lr.id}/index.html")
        href = page.locator("a.json-link").get_attribute("href")
        resp = page.request.get(page.locator("a.json-link").evaluate("a => a.href"))
        assert resp.status == 200 and resp.headers["content-type"].startswith("application/json")
        body = resp.body()
        assert body == (tmp_path / "api" / "v1" / "recipes" / f"{lr.id}.json").read_bytes(), href
        assert json.loads(body)  # a JSON document
        # following the link in the browser lands on the same document
        page.locator("a.json-link").click()
        page.wait_for_url(f"**/api/v1/recipes/{lr.id}.json")
    assert watch.problems == []
    context.close()


def test_index_filter_narrows_the_list(browser, server, catalog):
    context, page, watch = _new_page(browser, server)
    page.goto(server.base_url + "index.html")
    items = page.locator("ol.recipes > li")
    assert page.locator("form.filters").is_visible()
    total = items.count()
    assert total == len(catalog)
    visible = lambda: [li.get_attribute("data-id") for li in items.all() if li.is_visible()]  # noqa: E731
    assert len(visible()) == total
    for name in ("hardware", "backend"):
        select = page.locator(f"select[name={name}]")
        values = [v for v in select.locator("option").evaluate_all("os => os.map(o => o.value)") if v]
        for value in values:
            select.select_option(value)
            want = sorted(lr.id for lr in catalog if _key(lr, name) == value)
            assert sorted(visible()) == want
            assert page.locator("#recipe-count").inner_text() == f"{len(want)} of {total} recipes shown"
        select.select_option("")
        assert len(visible()) == total
    if len({_key(lr, "hardware") for lr in catalog}) > 1:
        page.locator("select[name=hardware]").select_option(_key(catalog[0], "hardware"))
        assert 0 < len(visible()) < total
    # a filter in the query string is applied on load (shareable filtered view)
    page.goto(server.base_url + f"index.html?backend={catalog[0].recipe.backend}")
    assert sorted(visible()) == sorted(lr.id for lr in catalog if lr.recipe.backend == catalog[0].recipe.backend)
    assert watch.problems == []
    context.close()


def _key(lr, name: str) -> str:
    from recipekit.site.pages import slug

    return slug(lr.recipe.hardware.accelerator) if name == "hardware" else lr.recipe.backend


def test_without_javascript_the_list_is_complete_and_filter_pages_work(browser, server, catalog):
    context, page, watch = _new_page(browser, server, java_script_enabled=False)
    page.goto(server.base_url + "index.html")
    assert page.locator("ol.recipes > li").count() == len(catalog)
    assert all(li.is_visible() for li in page.locator("ol.recipes > li").all())
    assert not page.locator("form.filters").is_visible()  # a form that could not filter is not shown
    # static per-hardware pages stand in for the filter
    lr = catalog[0]
    page.goto(server.base_url + f"hardware/{_key(lr, 'hardware')}.html")
    ids = page.locator("ol.recipes > li").evaluate_all("ls => ls.map(l => l.dataset.id)")
    assert sorted(ids) == sorted(x.id for x in catalog if _key(x, "hardware") == _key(lr, "hardware"))
    page.goto(server.base_url + f"recipes/{lr.id}/index.html")
    assert page.locator("pre[id^=launch-]").first.is_visible()
    assert not page.locator("button.copy").first.is_visible()  # the copy button needs JS: hidden without it
    assert watch.problems == []
    context.close()


def test_screenshots_and_phone_width(browser, server, catalog):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    rid = (
        sorted(lr.id for lr in catalog if lr.recipe.results)[0]
        if any(lr.recipe.results for lr in catalog)
        else catalog[0].id
    )
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        context, page, watch = _new_page(browser, server, viewport=viewport)
        for name, path in (("index", "index.html"), (rid, f"recipes/{rid}/index.html")):
            page.goto(server.base_url + path, wait_until="load")
            # nothing wider than the screen: long commands scroll inside their own box
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} is {overflow}px wider than a {viewport['width']}px screen"
            shot = ARTIFACTS / f"{name}-{label}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        assert watch.problems == []
        context.close()


def test_preview_server_is_loopback_and_serves_json(server, site):
    import urllib.request

    assert server.httpd.server_address[0] == "127.0.0.1"
    rel = next(p for p in site[1].json_files if p.startswith("api/v1/recipes/"))
    with urllib.request.urlopen(server.base_url + rel, timeout=10) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        assert resp.read() == (site[0] / rel).read_bytes()


def test_recipe_site_serve_command(tmp_path):
    """`recipe site --serve --port 0` builds, prints its loopback URL, serves, and stops on SIGINT."""
    import re
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    recipe = Path(sys.executable).with_name("recipe")
    out = tmp_path / "served"
    proc = subprocess.Popen(
        [str(recipe), "site", "--serve", "--port", "0", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline and "serving" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "recipe site --serve exited early"
        m = re.search(r"at (http://127\.0\.0\.1:(\d+)/)", line)
        assert m, line
        with urllib.request.urlopen(m.group(1) + "index.html", timeout=10) as resp:
            assert resp.status == 200 and resp.read() == (out / "index.html").read_bytes()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0

"""The documentation site in a real browser, offline: headless Chromium (Debian's ``chromium``,
which ``make chromium`` installs with hack/chromium.sh) driven over its DevTools protocol.

The site is built from this checkout (``mkdocs build --strict``, with the pinned Mermaid and search
shim that ``make docs-assets`` fetched) and served on 127.0.0.1; Chromium resolves no other host.
The test asserts that every Mermaid diagram of the site is drawn as an SVG (not left as text, not
a Mermaid syntax error), that search returns results both served and opened from
``site/index.html`` as a file, that no page shows list numbers run into a paragraph or an
unrendered admonition, and that no page or worker requests anything but loopback, ``file:`` or
inline data. Screenshots of the home page and of a how-to page go to ``build/docs-site/`` for a
person to look at.

Without Chromium the test FAILS, saying how to install it (as the monitoring tests do without
promtool); it never skips.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import http.server
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "docs-site"
#: Requests a page may make: the loopback server, the site's files, inline data.
LOCAL = re.compile(r"^(https?://127\.0\.0\.1(:\d+)?/|file://|data:|blob:|about:|chrome-error:)")


def _chromium() -> str:
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not exe or not os.access(exe, os.X_OK):
        pytest.fail(
            "chromium not found: run `make chromium` (installs Debian's chromium package, as root) or set "
            "CHROMIUM=/path/to/chromium; the documentation site is NOT checked in a browser",
            pytrace=False,
        )
    return exe


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build failed (make docs-assets first?):\n{done.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        pass


# --- a minimal DevTools protocol client ------------------------------------------------------------


class Page:
    """One Chromium page over the DevTools protocol, with the workers it starts auto-attached."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.requests: list[str] = []
        self.reader = asyncio.create_task(self._read())
        self.tasks: set[asyncio.Task[Any]] = set()

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                future = self.pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            method, params = data.get("method", ""), data.get("params", {})
            self.events.append((method, params))
            if method == "Network.requestWillBeSent":
                self.requests.append(params["request"]["url"])
            elif method == "Target.attachedToTarget":  # a worker: watch its requests too
                session = params["sessionId"]
                for call in ("Network.enable", "Runtime.runIfWaitingForDebugger"):
                    task = asyncio.create_task(self.send(call, session=session))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
        key = next(self.ids)
        message: dict[str, Any] = {"id": key, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[key] = future
        await self.ws.send_str(json.dumps(message))
        answer = await asyncio.wait_for(future, 30)
        if "error" in answer:
            raise AssertionError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def open(self, url: str) -> None:
        seen = len(self.events)
        await self.send("Page.navigate", {"url": url})
        await self.until(lambda: any(m == "Page.loadEventFired" for m, _ in self.events[seen:]), url)

    async def js(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result.get("result", {}).get("value")

    async def until(self, check: Any, what: str, seconds: float = 20.0) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {seconds}s waiting for {what}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
        await asyncio.to_thread(_write, path, base64.b64decode(shot["data"]))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@contextlib.asynccontextmanager
async def chromium(tmp: Path) -> AsyncIterator[Page]:
    profile = tmp / "profile"
    proc = await asyncio.create_subprocess_exec(
        *[
            _chromium(),
            "--headless=new",
            "--no-sandbox",  # root in the test machine
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no host but loopback resolves
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert proc.returncode is None, f"chromium exited with {proc.returncode}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port in 30s"
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as http_session:
            async with http_session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with http_session.ws_connect(url, max_msg_size=64 * 1024 * 1024) as ws:
                page = Page(ws)
                await page.send("Page.enable")
                await page.send("Network.enable")
                await page.send("Runtime.enable")
                await page.send(
                    "Target.setAutoAttach",
                    {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True},
                )
                try:
                    yield page
                finally:
                    page.reader.cancel()
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


# --- what the pages must show ----------------------------------------------------------------------


def _pages(site: Path) -> list[str]:
    return sorted(
        str(p.relative_to(site))
        for p in site.rglob("*.html")
        if p.name != "404.html" and "assets" not in p.parts
    )


def _mermaid_pages(site: Path) -> dict[str, int]:
    """Each page with diagrams: how many it has (``<pre class="mermaid">`` before Material draws them)."""
    found = {page: (site / page).read_text().count('<pre class="mermaid">') for page in _pages(site)}
    return {page: n for page, n in found.items() if n}


def _attrs(node: dict[str, Any]) -> dict[str, str]:
    flat = node.get("attributes") or []
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _svg_count(node: dict[str, Any]) -> tuple[int, int]:
    """Diagrams drawn under ``node`` (closed shadow roots included): ``div.mermaid`` hosts whose
    shadow root holds an ``svg``, and how many of those are Mermaid's error picture."""
    drawn = broken = 0
    stack = [node]
    while stack:
        current = stack.pop()
        if current.get("nodeName") == "DIV" and "mermaid" in _attrs(current).get("class", "").split():
            children = [c for root in current.get("shadowRoots") or [] for c in root.get("children") or []]
            svg = next((c for c in children if c.get("nodeName", "").lower() == "svg"), None)
            if svg is not None:
                drawn += 1
                broken += _attrs(svg).get("aria-roledescription") == "error"
        stack.extend(current.get("children") or [])
        stack.extend(current.get("shadowRoots") or [])
    return drawn, broken


#: "3. It starts" at the start of a line or after a space: a list item's number, as text
_ITEM = re.compile(r"(?:^|\s)(\d{1,2})\. [A-Z*`<]")


def _lists_in_source(page: str) -> int | None:
    """How many ordered lists the page's Markdown starts (``1.`` lines outside code blocks)."""
    source = ROOT / "docs" / Path(page).with_suffix(".md")
    if not source.is_file():
        return None
    fenced, starts = False, 0
    for line in source.read_text().splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"\s*1\. ", line):
            starts += 1
    return starts


def test_no_page_has_list_numbers_run_into_a_paragraph_a_broken_list_or_an_unrendered_admonition(
    site: Path,
) -> None:
    """A list item indented wrongly (a table in step 2 at 3 spaces) ends the list: the steps after
    it become one paragraph "3. ... 4. ...", or a new list that starts again at 1 (Python-Markdown
    ignores the number a list starts with), or a nested list becomes items of its parent; an
    admonition that did not render shows ``!!!``."""
    bad = []
    for page in _pages(site):
        html = (site / page).read_text()
        article = html[html.index("<article") : html.index("</article>")]
        lists = _lists_in_source(page)
        if lists is not None and article.count("<ol>") != lists:
            bad.append(f"{page}: {lists} numbered list(s) in its Markdown, {article.count('<ol>')} rendered")
        for para in re.findall(r"<p>(.*?)</p>", html, flags=re.S):
            text = re.sub(r"<[^>]+>", "", para)
            numbers = [int(m[1]) for m in _ITEM.finditer(text)]
            if any(b == a + 1 for a, b in itertools.pairwise(numbers)):
                bad.append(f"{page}: list numbers in one paragraph: {text[:80]!r}")
            if re.search(r"(?:^|\n)\s*(?:!!!|\?\?\?\+?) ?\w", text):
                bad.append(f"{page}: unrendered admonition: {text[:80]!r}")
    assert bad == []


async def test_the_site_in_chromium_offline(site: Path, served: str, tmp_path: Path) -> None:
    """Diagrams drawn, search answering (served and from a file), nothing fetched from elsewhere;
    the screenshots for a person to look at."""
    started = time.monotonic()
    diagrams = _mermaid_pages(site)
    assert sum(diagrams.values()) >= 2, f"the site has lost its diagrams: {diagrams}"
    async with chromium(tmp_path) as page:
        try:
            await _check_site(page, site, served, diagrams)
        except AssertionError as exc:
            outside = sorted({url for url in page.requests if not LOCAL.match(url)})
            raise AssertionError(f"{exc}; requests outside loopback and files: {outside}") from exc
        outside = sorted({url for url in page.requests if not LOCAL.match(url)})
        assert outside == [], "the site requested something other than loopback or its files"
        assert any(url.startswith(served) for url in page.requests), "no request was recorded at all"
    elapsed = time.monotonic() - started
    assert elapsed < 90, f"the browser check took {elapsed:.0f}s (about a minute at most)"


async def _check_site(page: Page, site: Path, served: str, diagrams: dict[str, int]) -> None:
    """Every diagram drawn as an SVG, a how-to page shot, search served and from the file."""
    # every diagram drawn as an SVG
    for name, expected in diagrams.items():
        await page.open(f"{served}/{name}")

        async def drawn(name: str = name, expected: int = expected) -> bool:
            tree = await page.send("DOM.getDocument", {"depth": -1, "pierce": True})
            count, broken = _svg_count(tree["root"])
            assert broken == 0, f"{name}: Mermaid drew an error instead of a diagram"
            return count == expected

        await page.until(drawn, f"{expected} diagram(s) drawn as SVG on {name}")
        assert await page.js("document.querySelectorAll('pre.mermaid').length") == 0, name
        if name == "index.html":  # the diagram in view
            await page.js("document.querySelector('div.mermaid').scrollIntoView({block: 'center'})")
            await asyncio.sleep(0.3)
            await page.screenshot(SHOTS / "home.png")

    # a how-to page, for the eye
    await page.open(f"{served}/how-to/nvidia-time-slicing.html")
    await page.screenshot(SHOTS / "how-to-nvidia-time-slicing.png")

    # search: served, then from the file, as a user opens site/index.html
    for base in (served, (site / "index.html").as_uri().removesuffix("/index.html")):
        await page.open(f"{base}/index.html")
        await page.until(lambda: _search(page, "pool"), f"search results for 'pool' at {base}", seconds=30)
    await page.screenshot(SHOTS / "search-from-file.png")


async def _search(page: Page, term: str) -> bool:
    """Open Material's search as a user does (its button, then typing ``term``) and say whether
    results are listed. Opened from a file, the page loads its search index only once search is
    opened; until the index is in, typing again is what asks again."""
    state = await page.js(
        "(() => { const toggle = document.getElementById('__search');"
        " if (!toggle.checked) document.querySelector('label[for=__search]').click();"
        " const q = document.querySelector('input[data-md-component=search-query]'); q.focus();"
        " return {value: q.value, results: document.querySelectorAll('.md-search-result__item').length} })()"
    )
    if state["results"]:
        return True
    if state["value"] != term:
        await page.js("document.querySelector('input[data-md-component=search-query]').value = ''")
        await page.send("Input.insertText", {"text": term})
    else:  # typed before the index was ready: one more keystroke
        await page.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": "End", "code": "End"})
        await page.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": "End", "code": "End"})
    return False

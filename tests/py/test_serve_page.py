"""The chat page at / in headless Chromium (Debian's `chromium`, driven by Playwright): a message
sent from the page streams a reply equal to what the API returns for the same conversation; a
screenshot goes to out/serve-chat.png."""
import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from lithe_server import server_fixture

server = server_fixture("--ctx", "512")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_chat_page_streams_a_reply(server):
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is missing: run scripts/install-deps.sh (Debian package chromium)")
    from playwright.sync_api import expect, sync_playwright

    question = "What color is the sky?"
    want = server.client().chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": question}], max_tokens=24,
        temperature=0).choices[0].message.content
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 900, "height": 600})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server.url + "/")
        expect(page.locator("#model")).to_have_text(server.model)
        page.fill("#temperature", "0")
        page.fill("#max_tokens", "24")
        page.fill("#input", question)
        page.keyboard.press("Enter")
        reply = page.locator(".msg.assistant.done")
        reply.wait_for(timeout=60_000)
        assert reply.inner_text().strip() == want.strip()
        assert "blue" in reply.inner_text()
        expect(page.locator(".meta")).to_contain_text("finish: ")
        out = ROOT / "out"
        out.mkdir(exist_ok=True)
        page.screenshot(path=str(out / "serve-chat.png"), full_page=True)
        browser.close()
    assert not errors

"""The web console in a real browser: Debian's chromium, headless, driven by
Playwright, against a running bot with the fakes (tests/web/console.py). One
browser session signs in with a one-time link, sees every page, approves a
pairing, reloads a soul, rolls a heartbeat write back and sees the usage chart
drawn from the ledger's rows; a screenshot of each page is kept in
test-artifacts/ (`make test` installs chromium when it is missing)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from playwright.async_api import Page, async_playwright

from bot.soul.soulfile import SoulFile
from tests.web.console import console

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MISSING = "chromium is missing: `make test` installs it (apt-get install chromium)"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
HEARTBEAT_LINE = "The heartbeat wrote this line."


async def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"web-{name}.png"), full_page=True)


async def test_an_admin_runs_the_bot_from_a_browser(tmp_path: Path) -> None:
    assert shutil.which(CHROMIUM), MISSING
    async with console(tmp_path) as c, async_playwright() as pw:
        await c.platform.say("hello?", user="777", name="Stranger")  # a pairing request
        await c.platform.replies(2)  # its code
        code = (await c.runtime.access.pending())[0].code
        soul = c.runtime.registry.get("lark")
        assert soul is not None
        before = (soul.folder / "SOUL.md").read_text()
        SoulFile(soul.folder).update(lambda text, now: text + f"\n{HEARTBEAT_LINE}\n")
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS,
                                           chromium_sandbox=False)  # fmt: skip
        context = await browser.new_context(viewport={"width": 1100, "height": 800})
        context.set_default_timeout(10_000)
        page = await context.new_page()
        try:
            await page.goto(await c.runtime.web_login.issue_link("cli"))
            await page.click("#sign-in")
            await page.wait_for_url("**/souls")
            assert await page.locator("#soul-lark").count() == 1
            change = page.locator("#soul-lark details.change").first
            await change.locator("summary").click()
            assert HEARTBEAT_LINE in await change.locator("pre").inner_text()
            await _shot(page, "souls")

            await page.click("text=Reload lark")
            assert "lark: loaded" in await page.locator("#result").inner_text()

            await page.goto(c.url + "/souls")
            change = page.locator("#soul-lark details.change").first
            await change.locator("summary").click()
            await change.locator("text=Roll back to").click()
            assert "rolled back" in await page.locator("#result").inner_text()
            assert (soul.folder / "SOUL.md").read_text() == before

            await page.goto(c.url + "/people")
            assert code in await page.locator("tr.pending").inner_text()
            await _shot(page, "people")
            await page.locator("tr.pending", has_text=code).locator("text=Approve").click()
            assert "telegram:777 approved" in await page.locator("#result").inner_text()
            assert [a.user_id for a in await c.runtime.access.approved()] == ["777"]

            await page.goto(c.url + "/memory")
            assert "shared wiki" in await page.content()
            await _shot(page, "memory")

            await page.goto(c.url + "/usage")
            today = datetime.now(UTC).date().isoformat()
            drawn = page.locator("#usage-chart svg g[id^='tokens-']")
            # The turns' ledger rows, drawn by bot/model/usage_chart.py: today's part by source.
            assert await drawn.evaluate_all("gs => gs.map(g => g.id)") == [f"tokens-{today}-turn"]
            assert await page.locator(f"#usage-chart g[id='cost-{today}-turn']").count() == 1
            assert (await page.locator("#usage-chart svg").bounding_box() or {}).get("height", 0)
            await _shot(page, "usage")

            await page.goto(c.url + "/health")
            assert "telegram" in await page.locator("table").first.inner_text()
            await _shot(page, "health")
        finally:
            await browser.close()

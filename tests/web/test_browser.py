"""The web console in a real browser: Debian's chromium, headless, driven by
Playwright, against `soulbot run` (a process) with the Telegram and model fakes.
One browser session signs in with the one-time link `soulbot web-login` prints,
sees every page, approves a stranger's pairing (who is then answered), reloads a
soul, rolls a heartbeat write back and sees the usage chart drawn from the
ledger's rows; a screenshot of each page is kept in test-artifacts/ (`make test`
installs chromium when it is missing)."""

from __future__ import annotations

import asyncio
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright

from bot import prompts
from bot.soul.soulfile import SoulFile
from tests.daemons import RunningDaemon, daemon_env
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import example_souls
from tests.run_cli import soulbot
from tests.web.console import daemon_config, free_port

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MISSING = "chromium is missing: `make test` installs it (apt-get install chromium)"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
HEARTBEAT_LINE = "The heartbeat wrote this line."
ADMIN, STRANGER = 1, 777
CODE = re.compile(re.escape(prompts.PAIRING_CODE.split("{code}")[0]) + r"(\S+) ")


async def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"web-{name}.png"), full_page=True)


async def test_an_admin_runs_the_daemon_from_a_browser(tmp_path: Path) -> None:
    assert shutil.which(CHROMIUM), MISSING
    folder = example_souls(tmp_path) / "wren"
    before = (folder / "SOUL.md").read_text()
    SoulFile(folder).update(lambda text, now: text + f"\n{HEARTBEAT_LINE}\n")
    async with FakeTelegram() as tg, FakeAnthropic() as model, async_playwright() as pw:
        config = daemon_config(tmp_path, tg.base_url, f"127.0.0.1:{free_port()}")
        env = daemon_env(model.url, TELEGRAM_TOKEN=tg.token)
        daemon = RunningDaemon(tmp_path, config, env)
        await daemon.start()
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS,
                                           chromium_sandbox=False)  # fmt: skip
        try:
            tg.push_message(ADMIN, "hello, wren", user_id=ADMIN)  # a turn: the ledger's row
            tg.push_message(STRANGER, "hello?", user_id=STRANGER, first_name="Stranger")
            await tg.wait_sent(2, timeout=20)
            [asked] = tg.bot_messages(STRANGER)
            found = CODE.search(asked["text"])
            assert found is not None, asked["text"]
            printed = await asyncio.to_thread(soulbot, "web-login", "--config", str(config),
                                              cwd=tmp_path, env=env)  # fmt: skip
            assert printed.returncode == 0, printed.stderr
            url, link = printed.stdout.split("/login/")[0], printed.stdout.strip()

            context = await browser.new_context(viewport={"width": 1100, "height": 800})
            context.set_default_timeout(15_000)
            page = await context.new_page()
            await page.goto(link)
            await page.click("#sign-in")
            await page.wait_for_url("**/souls")
            assert await page.locator("#soul-wren").count() == 1
            change = page.locator("#soul-wren details.change").first
            await change.locator("summary").click()
            assert HEARTBEAT_LINE in await change.locator("pre").inner_text()
            await _shot(page, "souls")

            await page.click("text=Reload wren")
            assert "wren: loaded" in await page.locator("#result").inner_text()

            await page.goto(url + "/souls")
            change = page.locator("#soul-wren details.change").first
            await change.locator("summary").click()
            await change.locator("text=Roll back to").click()
            assert "rolled back" in await page.locator("#result").inner_text()
            assert (folder / "SOUL.md").read_text() == before

            await page.goto(url + "/people")
            assert found.group(1) in await page.locator("tr.pending").inner_text()
            await _shot(page, "people")
            pending = page.locator("tr.pending", has_text=found.group(1))
            await pending.locator("text=Approve").click()
            assert f"telegram:{STRANGER} approved" in await page.locator("#result").inner_text()
            tg.push_message(STRANGER, "am I in?", user_id=STRANGER, first_name="Stranger")
            await tg.wait_for(lambda f: len(f.bot_messages(STRANGER)) >= 2, 20, what="an answer")
            assert not CODE.search(tg.bot_messages(STRANGER)[-1]["text"])

            await page.goto(url + "/memory")
            assert "shared wiki" in await page.content()
            await _shot(page, "memory")

            await page.goto(url + "/usage")
            today = datetime.now(UTC).date().isoformat()
            drawn = page.locator("#usage-chart svg g[id^='tokens-']")
            # The daemon's turns, from its ledger, drawn by bot/model/usage_chart.py.
            assert await drawn.evaluate_all("gs => gs.map(g => g.id)") == [f"tokens-{today}-turn"]
            assert await page.locator(f"#usage-chart g[id='cost-{today}-turn']").count() == 1
            assert (await page.locator("#usage-chart svg").bounding_box() or {}).get("height", 0)
            await _shot(page, "usage")

            await page.goto(url + "/health")
            assert "telegram" in await page.locator("table").first.inner_text()
            await _shot(page, "health")
        finally:
            await browser.close()
            assert await daemon.stop() == 0
    assert daemon.named("web.login") and daemon.named("pairing.approved")
    changes = {e.get("what") for e in daemon.named("web.change")}
    assert changes == {"soul.reload", "soul.rollback", "pairing.approve"}

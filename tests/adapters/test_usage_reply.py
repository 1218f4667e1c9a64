"""`/soul usage` on a phone, through the real adapters against the fakes: the
compact text and the chart (a Telegram photo, a Discord image attachment) drawn
from the ledger's rows; the table on the terminal; only for admins; the text
alone when the chart cannot be drawn."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from bot import prompts
from bot.app.runtime import Runtime
from bot.model.usage_chart import SIZE_PX, render, usage_days
from bot.model.usage_compact import WIDTH
from tests.adapters.test_discord import ADMIN as DISCORD_ADMIN
from tests.adapters.test_discord import CHANNEL, GUILD, discord_bot, followups
from tests.adapters.test_telegram import ADMIN, GROUP, telegram
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.telegram_fake import parse_html
from tests.kit import capture_logs, make_config, running


def decoded_size(png: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, decoded whole."""
    height, width = imread(io.BytesIO(png)).shape[:2]
    return width, height


async def ledger_chart(runtime: Runtime, days: int) -> bytes:
    """The chart of the ledger's rows as the command draws it, today."""
    usage = await runtime.db.run(lambda conn: usage_days(conn, days=days, now=time.time()))
    assert usage.parts  # the rows are there: the chart has bars
    return render(usage)


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


async def test_telegram_gets_the_compact_text_and_the_chart_as_a_photo(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, _model, runtime):
        tg.push_message(ADMIN, "hello there", user_id=ADMIN)
        await tg.wait_sent(1)
        await runtime.sessions.wait(5)
        asked = tg.push_message(ADMIN, "/soul usage 7", user_id=ADMIN)
        [_, report] = await tg.wait_sent(2)
        await tg.wait_for(lambda f: len(f.photos) == 1, what="the chart")
        expected = await ledger_chart(runtime, 7)
    text = parse_html(report["text"])  # as the phone shows it: a <pre> block
    assert "\nlark " in text and "\nturn " in text and "\nTOTAL " in text
    assert max(len(line) for line in lines_of(text)) <= WIDTH  # no line wraps on a phone
    [photo] = tg.photos
    assert photo.chat_id == ADMIN and photo.file.file_name.endswith(".png")
    assert (photo.width, photo.height) == SIZE_PX == decoded_size(photo.file.data)
    assert photo.file.data == expected  # drawn from the ledger's rows
    # The text answers the command; the photo follows it.
    assert report["reply_parameters"]["message_id"] == asked
    [call] = tg.calls_of("sendPhoto")
    assert "reply_parameters" not in call.params


async def test_discord_gets_the_compact_text_with_the_chart_attached(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, _model, runtime):
        dc.push_message(900, "hello there", author_id=DISCORD_ADMIN)
        await dc.wait_sent(1)
        await runtime.sessions.wait(5)
        dc.push_message(900, "/soul usage", author_id=DISCORD_ADMIN)
        [_, report] = await dc.wait_sent(2)
        expected = await ledger_chart(runtime, 1)
    assert "\nlark " in report.content and "\nTOTAL " in report.content
    assert max(len(line) for line in lines_of(report.content)) <= WIDTH
    [upload] = report.files
    assert upload.filename.endswith(".png") and upload.data == expected
    assert decoded_size(upload.data) == SIZE_PX


async def test_a_chart_discord_refuses_leaves_the_text(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with discord_bot(tmp_path) as (dc, _model, runtime):
            dc.push_message(900, "hello there", author_id=DISCORD_ADMIN)
            await dc.wait_sent(1)
            await runtime.sessions.wait(5)
            dc.max_upload_bytes = 1_000  # the chart is larger: 413, as Discord answers
            dc.push_message(900, "/soul usage", author_id=DISCORD_ADMIN)
            [_, report] = await dc.wait_sent(2)
    assert "\nTOTAL " in report.content and report.files == ()
    [refused] = [line for line in logs if line["event"] == "discord.image_refused"]
    assert refused["status"] == 413
    assert not [line for line in logs if line["event"] == "adapter.error"]


async def test_the_discord_slash_command_answers_privately_with_the_chart(
    tmp_path: Path,
) -> None:
    async with discord_bot(tmp_path) as (dc, _model, runtime):
        dc.push_message(900, "hello there", author_id=DISCORD_ADMIN)
        await dc.wait_sent(1)
        await runtime.sessions.wait(5)
        days = [{"type": 4, "name": "days", "value": 3}]
        token = dc.push_interaction("soul usage", days, user_id=DISCORD_ADMIN,
                                    channel_id=CHANNEL, guild_id=GUILD)  # fmt: skip
        await dc.wait_for(lambda f: bool(followups(f, token)), what="the follow-up")
        expected = await ledger_chart(runtime, 3)
    [answer] = followups(dc, token)
    assert answer.data["flags"] & 64  # ephemeral: only the admin sees it, picture included
    assert "\nlark " in (answer.content or "")
    [upload] = answer.files
    assert upload.data == expected and decoded_size(upload.data) == SIZE_PX
    assert len(dc.sent) == 1  # nothing in the channel


async def test_the_terminal_keeps_the_table_and_gets_no_picture(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as model,
        running(make_config(tmp_path, model.url), "console") as (_, terminal),
    ):
        await terminal.say("hello there")
        await terminal.replies(1)
        await terminal.say("/soul usage")
        [_, report] = await terminal.replies(2)
    assert report.image is None and "Usage by soul" in report.text
    assert "cache write" in report.text  # the table's header


async def test_not_for_someone_who_is_no_admin(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, _model, _runtime):
        tg.push_message(GROUP, "/soul usage@soul_test_bot", user_id=5, chat_type="supergroup")
        [refusal] = await tg.wait_sent(1)
    assert refusal["text"] == prompts.ADMIN_ONLY.format(command="soul")
    assert tg.photos == [] and tg.calls_of("sendPhoto") == []


async def test_a_chart_that_cannot_be_drawn_leaves_the_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("forced: no drawing today")

    monkeypatch.setattr(Figure, "savefig", broken)  # matplotlib fails, as a library may
    with capture_logs() as logs:
        async with telegram(tmp_path) as (tg, _model, runtime):
            tg.push_message(ADMIN, "hello there", user_id=ADMIN)
            await tg.wait_sent(1)
            await runtime.sessions.wait(5)
            tg.push_message(ADMIN, "/soul usage", user_id=ADMIN)
            [_, report] = await tg.wait_sent(2)
    assert "\nTOTAL " in parse_html(report["text"])
    assert tg.calls_of("sendPhoto") == []
    [failed] = [line for line in logs if line["event"] == "usage.chart_failed"]
    assert failed["log_level"] == "error" and "forced: no drawing today" in failed["error"]
    assert not [line for line in logs if line["event"] == "adapter.error"]


async def test_no_model_call_no_chart(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, _model, _runtime):
        tg.push_message(ADMIN, "/soul usage", user_id=ADMIN)
        [report] = await tg.wait_sent(1)
    assert parse_html(report["text"]).startswith("No usage recorded in the last 1 day(s)")
    assert tg.calls_of("sendPhoto") == []

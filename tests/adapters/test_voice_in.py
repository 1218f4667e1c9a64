"""Voice notes in, end to end (issue 28): the real python-telegram-bot and
discord.py against their fakes, the real runtime against the model fake and
the transcription fake, which decodes the real OGG/Opus it gets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.voice import weight
from bot.types import Audio, Inbound
from tests.adapters.test_discord import ADMIN as DISCORD_ADMIN
from tests.adapters.test_discord import discord_bot
from tests.adapters.test_telegram import ADMIN, GROUP, telegram
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.audio import tone_ogg_opus
from tests.fakes.discord_fake import FakeFile
from tests.fakes.telegram_fake import FakeTelegram, parse_html
from tests.fakes.transcription_fake import FakeTranscription
from tests.kit import user_texts, wait_until

HARBOUR = "Meet me at the harbour at six."
NOTE = tone_ogg_opus(3.0, 440.0)


def voice(url: str, more: str = "") -> str:
    return (f"voice: {{transcription: {{base_url: '{url}', api_key: test-transcription-key"
            f"{more}}}}}\n")  # fmt: skip


@asynccontextmanager
async def heard_on_telegram(
    tmp_path: Path, more: str = "", extra: str = ""
) -> AsyncIterator[tuple[FakeTelegram, FakeAnthropic, Runtime, FakeTranscription]]:
    async with FakeTranscription() as ears:
        ears.say(440.0, HARBOUR)
        async with telegram(tmp_path, voice(ears.url, more) + extra) as (tg, model, runtime):
            yield tg, model, runtime, ears


def no_audio_under(root: Path) -> list[Path]:
    """The files under `root` (data_dir, workspaces, logs) holding OGG's magic."""
    return [p for p in root.rglob("*") if p.is_file() and b"OggS" in p.read_bytes()]


async def voice_rows(runtime: Runtime) -> list[tuple[str, str, str, float, float]]:
    return await runtime.db.run(
        lambda c: [
            tuple(r)
            for r in c.execute(
                'SELECT "user", kind, model, amount, cost_usd FROM voice_usage ORDER BY id'
            )
        ]
    )


async def test_a_telegram_voice_note_reaches_the_model_as_its_transcript(tmp_path: Path) -> None:
    async with heard_on_telegram(tmp_path) as (tg, model, runtime, ears):
        tg.push_message(ADMIN, None, user_id=ADMIN, extra=tg.voice_extra(NOTE))
        [reply] = await tg.wait_sent(1)
        rows = await voice_rows(runtime)
        tg.push_message(ADMIN, "/soul usage", user_id=ADMIN)
        usage = (await tg.wait_sent(2))[-1]["text"]
        history = await runtime.history.load(f"telegram:{ADMIN}")
    heard = f"[voice note, 3 s] {HARBOUR}"
    assert user_texts(model.requests[0])[-1].endswith(heard)
    assert reply["text"].endswith(HARBOUR)
    [request] = ears.requests
    assert request.filename == "voice.ogg" and request.seconds == round(request.seconds, 3)
    assert next(e.text for e in history.entries if e.role == "user") == heard
    [(user, kind, name, seconds, cost)] = rows
    assert (user, kind, name) == (f"telegram:{ADMIN}", "heard", "whisper-1")
    assert abs(seconds - 3.0) < 0.05 and abs(cost - seconds / 60 * 0.006) < 1e-9
    voice_line = parse_html(usage).split("\nvoice ", 1)[1].splitlines()[1]
    assert voice_line.split() == ["heard", f"{round(seconds)}s", "<$0.01"]  # $0.0003
    assert no_audio_under(tmp_path) == []


async def test_a_discord_voice_message_reaches_the_model_as_its_transcript(
    tmp_path: Path,
) -> None:
    async with FakeTranscription() as ears:
        ears.say(440.0, HARBOUR)
        async with discord_bot(tmp_path, voice(ears.url)) as (dc, model, runtime):
            dc.push_voice_message(900, NOTE, author_id=DISCORD_ADMIN)
            [reply] = await dc.wait_sent(1)
            song = tone_ogg_opus(1.0, 660.0)
            dc.push_message(900, "and this", author_id=DISCORD_ADMIN,
                            attachments=[FakeFile("tune.ogg", song, "audio/ogg")])  # fmt: skip
            await dc.wait_sent(2)
            rows = await voice_rows(runtime)
    assert user_texts(model.requests[0])[-1] == f"[voice note, 3 s] {HARBOUR}"
    assert reply.content.endswith(HARBOUR)
    assert user_texts(model.requests[1])[-1] == (
        '[audio file "tune.ogg", 1 s] a tone of 660 Hz and this'
    )
    assert [r[1] for r in rows] == ["heard", "heard"]
    assert no_audio_under(tmp_path) == []


async def test_an_over_long_note_is_refused_before_its_download(tmp_path: Path) -> None:
    async with heard_on_telegram(tmp_path, ", max_seconds: 60") as (tg, model, _, ears):
        extra = tg.voice_extra(NOTE, duration=61)
        tg.push_message(ADMIN, None, user_id=ADMIN, extra=extra)
        [line] = await tg.wait_sent(1)
        assert tg.calls_of("getFile") == [] and tg.downloads == []
        tg.push_message(ADMIN, "did you get it?", user_id=ADMIN)
        await tg.wait_sent(2)
    reason = prompts.VOICE_TOO_LONG.format(kind="voice note", seconds=61, limit=60)
    assert line["text"] == prompts.VOICE_REFUSED.format(reasons=reason)
    assert ears.attempts == 0 and len(model.requests) == 1
    # The note is not lost from the conversation: its placeholder reaches the next turn.
    assert "[voice note, 61 s: not transcribed]" in user_texts(model.requests[0])


async def test_a_note_larger_than_it_said_is_cut_at_the_cap(tmp_path: Path) -> None:
    async with heard_on_telegram(tmp_path, ", max_bytes: 10000") as (tg, model, _, ears):
        assert len(NOTE) > 10_000
        tg.push_message(ADMIN, None, user_id=ADMIN,
                        extra=tg.voice_extra(NOTE, declared_size=5000))  # fmt: skip
        [line] = await tg.wait_sent(1)
    assert "too large for me (over 0.01 MB" in line["text"]
    assert ears.attempts == 0 and model.requests == []


async def test_a_failed_transcription_answers_one_line_and_loses_nothing(tmp_path: Path) -> None:
    async with heard_on_telegram(tmp_path) as (tg, model, runtime, ears):
        ears.fail_next(500)
        tg.push_message(ADMIN, None, user_id=ADMIN, extra=tg.voice_extra(NOTE))
        [line] = await tg.wait_sent(1)
        tg.push_message(ADMIN, None, user_id=ADMIN, extra=tg.voice_extra(NOTE))  # sent again
        [_, reply] = await tg.wait_sent(2)
        history = await runtime.history.load(f"telegram:{ADMIN}")
        rows = await voice_rows(runtime)
    reason = prompts.VOICE_FAILED.format(
        kind="voice note", reason="the transcription service answered 500"
    )
    assert line["text"] == prompts.VOICE_REFUSED.format(reasons=reason)
    assert [e.text for e in history.entries if e.role == "user"] == [
        "[voice note, 3 s: not transcribed]",
        f"[voice note, 3 s] {HARBOUR}",
    ]
    assert reply["text"].endswith(HARBOUR) and len(model.requests) == 1
    assert len(rows) == 1  # the failed one costs nothing
    assert no_audio_under(tmp_path) == []


async def test_without_transcription_the_line_names_the_setting(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(ADMIN, None, user_id=ADMIN, extra=tg.voice_extra(NOTE))
        [line] = await tg.wait_sent(1)
    assert line["text"] == prompts.VOICE_NOT_CONFIGURED
    assert "voice.transcription.base_url" in line["text"]
    assert tg.downloads == [] and model.requests == []


async def test_an_unaddressed_group_note_is_a_placeholder_unless_transcribed(
    tmp_path: Path,
) -> None:
    for mode, expected in [
        ("placeholder", "ann: [voice note, 3 s]"),
        ("transcribe", f"ann: [voice note, 3 s] {HARBOUR}"),
    ]:
        async with heard_on_telegram(tmp_path / mode, f", in_groups: {mode}") as (
            tg, model, _, ears,
        ):  # fmt: skip
            tg.push_message(GROUP, None, user_id=5, first_name="ann", chat_type="supergroup",
                            extra=tg.voice_extra(NOTE))  # fmt: skip
            await wait_until(lambda tg=tg: len(tg.calls_of("getUpdates")) > 2)
            tg.push_message(GROUP, "@soul_test_bot what did she say?", user_id=6,
                            chat_type="supergroup")  # fmt: skip
            await tg.wait_sent(1)
        context = "\n".join(user_texts(model.requests[0]))
        assert expected in context, context
        assert ears.attempts == (mode == "transcribe")


async def test_a_spent_budget_refuses_a_note_before_its_download(tmp_path: Path) -> None:
    budget = "budget: {daily_tokens_per_admin: 5}\n"
    async with heard_on_telegram(tmp_path, extra=budget) as (tg, model, _, ears):
        tg.push_message(ADMIN, None, user_id=ADMIN, extra=tg.voice_extra(NOTE))
        [line] = await tg.wait_sent(1)
    reason = prompts.VOICE_BUDGET.format(kind="voice note")
    assert line["text"] == prompts.VOICE_REFUSED.format(reasons=reason)
    assert tg.downloads == [] and ears.attempts == 0 and model.requests == []


def test_a_voice_note_counts_one_message_a_started_minute() -> None:
    def note(seconds: float | None) -> Audio:
        return Audio("voice", "audio/ogg", seconds, 1, fetch=lambda limit: asyncio.sleep(0, b""))

    spoken = Inbound("telegram", "1", "1", "Ann", "hi", True, spoken=True)
    assert weight(replace(spoken, audio=(note(5.0),))) == 1
    assert weight(replace(spoken, audio=(note(60.0),))) == 1
    assert weight(replace(spoken, audio=(note(61.0), note(None)))) == 2

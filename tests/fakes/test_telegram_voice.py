"""The Bot API fake's sendVoice, through PTB: it keeps the bytes, takes only
OGG/Opus that decodes, and refuses as Telegram does."""

from __future__ import annotations

import pytest
from telegram import Bot, InputFile, ReplyParameters
from telegram.error import BadRequest

from bot.voice.encode import decode, voice_note
from tests.fakes.speech_audio import tone, tone_pcm
from tests.fakes.telegram_fake import FakeTelegram


def _ogg(seconds: float) -> bytes:
    return voice_note(decode(tone_pcm(seconds, 24000), 24000)).data


async def test_send_voice_keeps_the_ogg_opus_bytes(fake: FakeTelegram, bot: Bot) -> None:
    mid = fake.push_message(42, "say it", user_id=7)
    data = _ogg(1.2)
    msg = await bot.send_voice(42, InputFile(data, filename="voice.ogg"), duration=2,
                               reply_parameters=ReplyParameters(mid))  # fmt: skip
    assert msg.voice is not None and msg.voice.mime_type == "audio/ogg"
    assert msg.voice.file_size == len(data)
    assert msg.reply_to_message is not None and msg.reply_to_message.text == "say it"
    [voice] = fake.voices
    assert (voice.chat_id, voice.message_id, voice.duration) == (42, msg.message_id, 2)
    assert voice.file.data == data and voice.file.file_name == "voice.ogg"
    again = await bot.send_voice(42, msg.voice.file_id)
    assert again.voice is not None and len(fake.voices) == 2 and fake.sent == []


async def test_send_voice_refuses_what_is_no_voice_note(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="must be ogg/opus"):
        await bot.send_voice(42, InputFile(tone(1.0, "mp3"), filename="voice.mp3"))
    with pytest.raises(BadRequest, match="must be ogg/opus"):
        await bot.send_voice(42, InputFile(b"OggS not really", filename="voice.ogg"))
    with pytest.raises(BadRequest, match=r"^File must be non-empty$"):
        await bot.send_voice(42, InputFile(b"", filename="voice.ogg"))
    with pytest.raises(BadRequest, match="Wrong file identifier"):
        await bot.send_voice(42, "NOPE")
    fake.voice_forbidden.add(42)
    with pytest.raises(BadRequest, match="Voice_messages_forbidden"):
        await bot.send_voice(42, InputFile(_ogg(0.5), filename="voice.ogg"))
    assert fake.voices == []
    assert [c.status for c in fake.calls_of("sendVoice")] == [400] * 5

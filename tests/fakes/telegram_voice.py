"""The bot's voice notes in the Bot API fake (tests/fakes/telegram_fake.py):
sendVoice.

sendVoice takes an uploaded file (multipart, as PTB sends an ``InputFile``) or
the ``file_id`` of one it took before, with ``duration``, ``caption``, replies and
topics as sendMessage. The fake keeps the bytes and decodes them whole
(tests/fakes/speech_audio.py): what is not OGG/Opus is refused (400 ``wrong
file type: a voice note must be OGG/Opus``, the fake's wording: Telegram takes
MP3 and M4A too, and shows other files as a document, but a soul's voice note
that is not OGG/Opus is a bug). Refused as Telegram does: no voice (400 ``there
is no voice in the request``), an empty file (400 ``file must be non-empty``),
over ``max_upload_bytes`` (413), a caption over 1024 UTF-16 code units, and
a chat in ``voice_forbidden`` (400 ``VOICE_MESSAGES_FORBIDDEN``: a person whose
privacy settings refuse voice notes). The answer is a message with ``voice``
(file_id, file_unique_id, duration, mime_type, file_size); each one taken is in
``voices``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tests.fakes.speech_audio import is_ogg_opus
from tests.fakes.telegram_http import ApiError, int_param
from tests.fakes.telegram_messages import BotMessages
from tests.fakes.telegram_records import JSON, Upload


@dataclass(frozen=True)
class SentVoice:
    """A voice note the bot sent: where, as which message, the file (its bytes
    checked to be OGG/Opus), the duration it announced, the caption."""

    chat_id: int
    message_id: int
    file: Upload
    duration: int | None
    caption: str | None
    file_id: str


class BotVoices(BotMessages):
    """sendVoice; see the module docstring."""

    @functools.cached_property
    def voices(self) -> list[SentVoice]:
        """The voice notes taken, in order."""
        return []

    @functools.cached_property
    def voice_forbidden(self) -> set[int]:
        """Chats whose person refuses voice notes."""
        return set()

    async def _send_voice(self, params: JSON) -> JSON:
        chat = self._chat(params)
        upload = self._upload(params, "voice", {v.file_id: v.file for v in self.voices})
        if len(upload.data) > self.max_upload_bytes:
            raise ApiError(413, "Request Entity Too Large")
        if not is_ogg_opus(upload.data):
            raise ApiError(400, "Bad Request: wrong file type: a voice note must be OGG/Opus")
        if chat["id"] in self.voice_forbidden:
            raise ApiError(400, "Bad Request: VOICE_MESSAGES_FORBIDDEN")
        caption = self._caption(params)
        duration = int_param(params, "duration")
        file_id = f"VOICE{len(self.voices) + 1:06d}"
        fields: JSON = {
            "voice": {
                "file_id": file_id,
                "file_unique_id": f"U{file_id}",
                "duration": duration or 0,
                "mime_type": "audio/ogg",
                "file_size": len(upload.data),
            }
        }
        if caption:
            fields["caption"] = caption
        message = self._new_message(chat, params, fields)
        sent = SentVoice(chat["id"], message["message_id"], upload, duration, caption, file_id)
        self.voices.append(sent)
        return message

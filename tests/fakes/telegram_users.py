"""What users send, in the Bot API fake (tests/fakes/telegram_fake.py): updates and
messages pushed for the bot to take, the files in them, and the downloads of
those files.

* Messages: ``push_message`` queues a message from a user; a text gets Telegram's
  automatic entities (``auto_entities``: a leading ``/command``, ``@mentions``).
* Files users send: ``add_file`` stores bytes and gives a file_id; ``photo_extra``,
  ``document_extra`` and ``sticker_extra`` build the message fields of a photo (sizes
  smallest first, each a JPEG of its width and height unless a test gives the
  bytes: tests/fakes/images.py), a document (any ``mime_type``, true or not) and a
  sticker as Telegram sends them, to pass as
  ``push_message(extra=...)``; ``voice_extra`` and ``audio_extra`` a voice note and an
  audio file (``duration`` measured from the bytes by PyAV unless a test says it).
  getFile answers ``{file_id, file_unique_id, file_size, file_path}`` (unknown id:
  400 ``invalid file_id``; over 20 MiB of data: 400 ``file is too big``, as
  Telegram); ``file_size`` is the declared size, which a test may make differ from
  the bytes. ``GET /file/bot<token>/<file_path>`` answers
  the bytes (wrong token or unknown path: 404 ``Not Found``); ``hang_downloads``
  holds the next ones to trip a client timeout. Each download is in ``downloads``
  when answered, with its status (499 if the client gave up), not in ``calls``.
* Deletions by someone else: ``delete_message`` takes a message away as a group's
  admin does, mid-stream too.
"""

from __future__ import annotations

import asyncio
import re
import time

from aiohttp import web

from tests.fakes.audio import tone_of
from tests.fakes.images import jpeg
from tests.fakes.telegram_http import ApiError
from tests.fakes.telegram_records import CLIENT_CLOSED, JSON, Deletion, Download, UserFile
from tests.fakes.telegram_state import TelegramState
from tests.fakes.telegram_text import utf16_len

MAX_DOWNLOAD_BYTES = 20 * 2**20  # the Bot API's cap on a file a bot fetches (getFile)
THUMBNAIL_SIDES = (90, 320)  # the long side of the smaller sizes Telegram adds to a photo

_COMMAND = re.compile(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{5,32}\b")


def auto_entities(text: str) -> list[JSON]:
    """The entities Telegram adds to a plain text: a leading ``/command`` and ``@mentions``."""
    entities: list[JSON] = []
    if m := _COMMAND.match(text):
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(m[0])})
    for m in _MENTION.finditer(text):
        entities.append(
            {"type": "mention", "offset": utf16_len(text[: m.start()]), "length": utf16_len(m[0])}
        )
    return entities


def _caption_fields(caption: str | None) -> JSON:
    """A user's ``caption`` with the ``caption_entities`` Telegram adds (none if no caption)."""
    if caption is None:
        return {}
    entities = auto_entities(caption)
    return {"caption": caption, **({"caption_entities": entities} if entities else {})}


def _quote(replied: JSON, quote: str) -> JSON:
    """Telegram's partial quote of ``replied``: the text, its UTF-16 offset in the
    replied text (or caption), chosen by the user. Raises ValueError if not in it."""
    text = str(replied.get("text") or replied.get("caption") or "")
    at = text.find(quote) if quote else -1
    if at < 0:
        raise ValueError(f"quote {quote!r} is not in the replied message {text!r}")
    return {"text": quote, "position": utf16_len(text[:at]), "is_manual": True}


class UserSide(TelegramState):
    """Pushing what users send, and serving the files in it."""

    def push_update(self, update: JSON) -> int:
        """Queue a raw update (``update_id`` assigned if missing) and return its id.
        Messages in it are remembered, so the bot can reply to them or edit them."""
        update = dict(update)
        update.setdefault("update_id", self._next_update_id)
        self._next_update_id = max(self._next_update_id, int(update["update_id"]) + 1)
        for key in ("message", "edited_message", "channel_post", "edited_channel_post"):
            message = update.get(key)
            if isinstance(message, dict) and "chat" in message and "message_id" in message:
                self._messages[message["chat"]["id"], message["message_id"]] = message
        self._updates.append(update)
        self._push_wake.set()
        self._notify()
        return int(update["update_id"])

    def push_message(
        self,
        chat_id: int,
        text: str | None,
        *,
        user_id: int,
        first_name: str = "Ann",
        username: str | None = None,
        chat_type: str = "private",
        message_thread_id: int | None = None,
        is_topic_message: bool = False,
        reply_to_bot: bool = False,
        reply_to: int | None = None,
        quote: str | None = None,
        entities: list[JSON] | None = None,
        extra: JSON | None = None,
    ) -> int:
        """Queue an update with a message from a user and return the message_id.

        A text gets ``entities`` if given, else Telegram's automatic ones (a leading
        ``/command``, ``@mentions``). ``reply_to_bot`` makes it a reply to the bot's
        last message in the chat (one is made up if there is none); ``reply_to`` a
        reply to that message of the chat, the user's or the bot's, as it is now
        (ValueError if unknown). Either way ``reply_to_message`` is the whole replied
        message, and ``quote`` adds Telegram's partial quote of its text (``quote``
        field: text, UTF-16 ``position``, ``is_manual``; ValueError if not in it).
        ``extra`` is merged into the message last (photo, caption, new_chat_members,
        ...: see ``photo_extra``, ``document_extra``, ``sticker_extra``).
        """
        if reply_to is not None and reply_to_bot:
            raise ValueError("push_message: give reply_to or reply_to_bot, not both")
        if quote is not None and reply_to is None and not reply_to_bot:
            raise ValueError("push_message: a quote needs reply_to or reply_to_bot")
        if reply_to is not None and (chat_id, reply_to) not in self._messages:
            raise ValueError(f"push_message: no message {reply_to} in chat {chat_id}")
        user: JSON = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username is not None:
            user["username"] = username
        chat = self._chats.get(chat_id, {}).copy()
        chat.update(id=chat_id, type=chat_type)
        if chat_type == "private":
            chat.update({k: v for k, v in user.items() if k in ("first_name", "username")})
        else:
            chat.setdefault("title", f"Group {chat_id}")
        if is_topic_message:
            chat["is_forum"] = True
        self._chats[chat_id] = chat
        replied = self._last_bot_message(chat, message_thread_id) if reply_to_bot else None
        if reply_to is not None:
            replied = self._reply_target(chat, reply_to)
        quoted = _quote(replied, quote) if replied is not None and quote is not None else None
        message: JSON = {
            "message_id": self._next_message_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": user,
        }
        if message_thread_id is not None:
            message["message_thread_id"] = message_thread_id
        if is_topic_message:
            message["is_topic_message"] = True
        if text is not None:
            message["text"] = text
            found = auto_entities(text) if entities is None else entities
            if found:
                message["entities"] = found
        if replied is not None:
            message["reply_to_message"] = replied
        if quoted is not None:
            message["quote"] = quoted
        message.update(extra or {})
        self.push_update({"message": message})
        return int(message["message_id"])

    def delete_message(self, chat_id: int, message_id: int) -> None:
        """Delete a message as someone else does (a group's admin, Telegram's
        anti-spam): the fake forgets it and records it in ``deleted``; from then on
        the bot's edit of it is 400 ``message to edit not found``, its delete 400
        ``message to delete not found``. Raises ValueError for an unknown message."""
        if self._messages.pop((chat_id, message_id), None) is None:
            raise ValueError(f"no message {message_id} in chat {chat_id}")
        self.deleted.append(Deletion(chat_id, message_id, time.monotonic()))
        self._notify()

    def add_file(self, data: bytes, *, declared_size: int | None = None) -> str:
        """Store a file a user sent and return its file_id. getFile answers it with
        ``file_size`` = ``declared_size`` if given (a test may lie), else ``len(data)``,
        and its ``file_path`` downloads ``data``."""
        n = len(self._files) + 1
        size = len(data) if declared_size is None else declared_size
        file = UserFile(f"FILE{n:06d}", f"UFILE{n:06d}", f"files/file_{n}", data, size)
        self._files[file.file_id] = file
        return file.file_id

    def photo_extra(
        self,
        data: bytes | None = None,
        *,
        width: int = 1280,
        height: int = 960,
        caption: str | None = None,
        declared_size: int | None = None,
    ) -> JSON:
        """Message fields of a photo as Telegram sends it, for ``push_message(extra=)``:
        ``photo``, PhotoSizes smallest first, each an added file: thumbnails with
        ``THUMBNAIL_SIDES`` as the long side (JPEGs of their size), then ``width`` x
        ``height`` with ``data`` (default: a JPEG of that size; ``declared_size`` as
        in ``add_file``); and ``caption`` with its automatic ``caption_entities``."""
        longest = max(width, height)
        sizes: list[JSON] = []
        for side in (s for s in THUMBNAIL_SIDES if s < longest):
            w, h = max(1, width * side // longest), max(1, height * side // longest)
            sizes.append(self._photo_size(self.add_file(jpeg(w, h, exif_bytes=0)), w, h))
        if data is None:
            data = jpeg(width, height)
        file_id = self.add_file(data, declared_size=declared_size)
        sizes.append(self._photo_size(file_id, width, height))
        return {"photo": sizes, **_caption_fields(caption)}

    def document_extra(
        self,
        data: bytes,
        *,
        file_name: str = "file.bin",
        mime_type: str = "application/octet-stream",
        caption: str | None = None,
        declared_size: int | None = None,
    ) -> JSON:
        """Message fields of a document a user sent, for ``push_message(extra=)``:
        ``document`` (an added file with ``file_name`` and ``mime_type``;
        ``declared_size`` as in ``add_file``) and ``caption`` as in ``photo_extra``."""
        file = self._files[self.add_file(data, declared_size=declared_size)]
        document = {**file.ref(), "file_name": file_name, "mime_type": mime_type}
        return {"document": document, **_caption_fields(caption)}

    def sticker_extra(
        self, data: bytes, *, emoji: str | None = "🙂", width: int = 512, height: int = 512
    ) -> JSON:
        """Message fields of a static sticker, for ``push_message(extra=)``: ``sticker``
        (an added file; type ``regular``, not animated, not video, with ``emoji``)."""
        file = self._files[self.add_file(data)]
        sticker: JSON = {
            **file.ref(),
            "type": "regular",
            "width": width,
            "height": height,
            "is_animated": False,
            "is_video": False,
        }
        if emoji is not None:
            sticker["emoji"] = emoji
        return {"sticker": sticker}

    # -- voice notes and audio files ------------------------------------------
    def voice_extra(
        self,
        data: bytes,
        *,
        duration: int | None = None,
        mime_type: str = "audio/ogg",
        declared_size: int | None = None,
        caption: str | None = None,
    ) -> JSON:
        """Message fields of a voice note, for ``push_message(extra=)``: ``voice``
        (an added file with ``duration`` in whole seconds, measured from ``data``
        unless given, and ``mime_type``; ``declared_size`` as in ``add_file``)."""
        file = self._files[self.add_file(data, declared_size=declared_size)]
        seconds = round(tone_of(data)[0]) if duration is None else duration
        voice = {**file.ref(), "duration": seconds, "mime_type": mime_type}
        return {"voice": voice, **_caption_fields(caption)}

    def audio_extra(
        self,
        data: bytes,
        *,
        duration: int | None = None,
        file_name: str = "song.ogg",
        mime_type: str = "audio/ogg",
        declared_size: int | None = None,
        caption: str | None = None,
    ) -> JSON:
        """Message fields of an audio file, for ``push_message(extra=)``: ``audio``,
        as ``voice_extra`` and with ``file_name``."""
        fields = self.voice_extra(data, duration=duration, mime_type=mime_type,
                                  declared_size=declared_size, caption=caption)  # fmt: skip
        voice = fields.pop("voice")
        return {**fields, "audio": {**voice, "file_name": file_name}}

    def hang_downloads(self, seconds: float, *, times: int = 1) -> None:
        """Hold the next ``times`` file downloads ``seconds`` before answering (``stop()``
        ends the wait), so a client's read timeout fires; one that gives up is in
        ``downloads`` with 499."""
        self._hangs.extend([seconds] * times)

    # -- file downloads --------------------------------------------------------
    def _record_download(self, download: Download) -> None:
        self.downloads.append(download)
        self._notify()

    async def _download(self, request: web.Request) -> web.Response:
        """``GET /file/bot<token>/<file_path>``: the bytes of an added file (after a
        scripted hang), or 404 ``Not Found`` for a wrong token or an unknown path."""
        t = time.monotonic()
        path = request.match_info["path"]
        try:
            await self._hang()
        except asyncio.CancelledError:
            self._record_download(Download(path, t, CLIENT_CLOSED))
            raise
        file = next((f for f in self._files.values() if f.file_path == path), None)
        if request.match_info["token"] != self.token or file is None:
            self._record_download(Download(path, t, 404))
            return ApiError(404, "Not Found").response()
        self._record_download(Download(path, t, 200))
        return web.Response(body=file.data, content_type="application/octet-stream")

    async def _hang(self) -> None:
        """Wait the next scripted hang out, if any (``stop()`` ends it)."""
        if not self._hangs:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._hangs.pop(0)
        while not self._closing and (remaining := deadline - loop.time()) > 0:
            await self._wait_change(remaining)

    async def _get_file(self, params: JSON) -> JSON:
        """An added file as a File object with its ``file_path`` (refused over
        ``MAX_DOWNLOAD_BYTES`` of data, as Telegram refuses files over 20 MB)."""
        file = self._files.get(str(params.get("file_id") or ""))
        if file is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        if len(file.data) > MAX_DOWNLOAD_BYTES:
            raise ApiError(400, "Bad Request: file is too big")
        return {**file.ref(), "file_path": file.file_path}

    # -- helpers ---------------------------------------------------------------
    def _photo_size(self, file_id: str, width: int, height: int) -> JSON:
        return {**self._files[file_id].ref(), "width": width, "height": height}

    def _last_bot_message(self, chat: JSON, thread: int | None) -> JSON:
        for (chat_id, _), message in reversed(self._messages.items()):
            if chat_id == chat["id"] and message.get("from", {}).get("id") == self.bot_id:
                return self._reply_target(chat, message["message_id"])
        made_up: JSON = {
            "message_id": self._next_message_id(chat["id"]),
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot_user,
            "text": "(an earlier message from the bot)",
        }
        if thread is not None:
            made_up["message_thread_id"] = thread
        self._messages[chat["id"], made_up["message_id"]] = made_up
        return made_up

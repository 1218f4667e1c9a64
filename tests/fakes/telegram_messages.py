"""The bot's messages in the Bot API fake (tests/fakes/telegram_fake.py):
sendMessage, sendDocument, editMessageText, deleteMessage and sendMessageDraft.

* Texts are checked as Telegram does: empty (after trimming) is 400 ``message text
  is empty``, over 4096 UTF-16 code units 400 ``message is too long``. With
  ``parse_mode=HTML`` the text is parsed like Telegram's parser
  (tests/fakes/telegram_text.py): the returned message carries the plain text,
  and limits apply to it. Invalid HTML is 400 ``can't parse entities: ...`` only
  with ``strict_html=True``; otherwise the raw text is kept. A reply
  (``reply_parameters`` or ``reply_to_message_id``) gets ``reply_to_message``: the
  remembered message (without its own ``reply_to_message``, as on Telegram), or a
  minimal one if the id is unknown.
* editMessageText replaces the text and the inline keyboard (none given: removed);
  it refuses unknown messages, messages not sent by the bot, unchanged text and
  keyboard (400 ``message is not modified: ...``) and a text over 4096 (400
  ``MESSAGE_TOO_LONG``, not sendMessage's wording), as Telegram does. Each one taken
  is in ``edits`` with a monotonic time, to check an edit rate.
* deleteMessage answers ``true`` and forgets the message (editing it again is 400
  ``message to edit not found``); each one is in ``deleted`` with a monotonic time.
  An unknown (or already deleted) message is 400 ``message to delete not found``; a
  user's message in a group 400 ``message can't be deleted``, as for a bot that is no
  admin there (in a private chat a bot may delete the user's messages too). A message
  older than 48 hours (its ``date``; ``age`` moves it back) is 400 ``message can't be
  deleted for everyone``: Telegram lets a bot delete for 48 hours, and edit at any age.
* sendMessageDraft (Bot API 9.3) streams a draft to a private chat the fake knows:
  an unknown chat is 400 ``chat not found``, a group 400 ``TEXTDRAFT_PEER_INVALID``
  (Telegram's answer), ``draft_id`` 0 or missing 400 ``draft_id must be non-zero``
  (the fake's wording). The text is parsed as sendMessage's, may be empty (Telegram
  then shows "Thinking..."), and over 4096 is 400 ``message is too long``. A draft
  makes no message: it is in ``drafts`` with a monotonic time, answered ``true``.
* sendDocument takes an uploaded file (or the ``file_id`` of one it took before) and
  answers a message with ``document`` (file_id, file_unique_id, file_name, mime_type,
  file_size) and the ``caption``, replies and topics as sendMessage. Refused as
  Telegram does: no document (400 ``there is no document in the request``), an empty
  file (400 ``file must be non-empty``), an unknown file_id (400 ``wrong file
  identifier/HTTP URL specified``), over ``max_upload_bytes`` (50 MB, as Telegram; 413
  ``Request Entity Too Large``), a caption over 1024 UTF-16 code units once parsed
  (400 ``message caption is too long``). Each one taken is in ``documents``.
"""

from __future__ import annotations

import time

from tests.fakes.telegram_http import ApiError, int_param, to_int
from tests.fakes.telegram_records import JSON, Deletion, Document, Draft, Edit, Upload
from tests.fakes.telegram_state import TelegramState
from tests.fakes.telegram_text import parse_html, utf16_len

MAX_TEXT_UTF16 = 4096
MAX_CAPTION_UTF16 = 1024
DELETE_WINDOW_S = 48 * 3600  # how long a bot may delete a message (editing has no limit)
EDIT_TOO_LONG = "Bad Request: MESSAGE_TOO_LONG"  # editMessageText's wording, not sendMessage's
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup"
    " are exactly the same as a current content and reply markup of the message"
)


def _inline_markup(params: JSON) -> JSON | None:
    """The inline keyboard a request attaches (the only markup a message keeps), or None."""
    markup = params.get("reply_markup")
    return markup if isinstance(markup, dict) and "inline_keyboard" in markup else None


class BotMessages(TelegramState):
    """The methods by which the bot sends, edits and deletes its messages."""

    async def _send_message(self, params: JSON) -> JSON:
        chat = self._chat(params)
        text = self._render(params)
        return self._new_message(chat, params, {"text": text})

    async def _send_document(self, params: JSON) -> JSON:
        chat = self._chat(params)
        known = {d.file_id: d.file for d in self.documents}
        upload = self._upload(params, "document", known)
        if len(upload.data) > self.max_upload_bytes:
            raise ApiError(413, "Request Entity Too Large")
        caption = self._caption(params)
        file_id = f"DOC{len(self.documents) + 1:06d}"
        fields: JSON = {
            "document": {
                "file_id": file_id,
                "file_unique_id": f"U{file_id}",
                "file_name": upload.file_name,
                "mime_type": upload.mime_type,
                "file_size": len(upload.data),
            }
        }
        if caption:
            fields["caption"] = caption
        message = self._new_message(chat, params, fields)
        self.documents.append(Document(chat["id"], message["message_id"], upload, caption, file_id))
        return message

    def _new_message(self, chat: JSON, params: JSON, fields: JSON) -> JSON:
        """A message from the bot in `chat` with `fields`, in the topic and
        replying to the message `params` name, stored."""
        message: JSON = {
            "message_id": self._next_message_id(chat["id"]),
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot_user,
            **fields,
        }
        thread = int_param(params, "message_thread_id")
        if thread is not None:
            message["message_thread_id"] = thread
            if chat.get("is_forum"):
                message["is_topic_message"] = True
        reply = params.get("reply_parameters")
        replied = reply.get("message_id") if isinstance(reply, dict) else None
        reply_id = to_int(replied or params.get("reply_to_message_id"), "reply_parameters")
        if reply_id is not None:
            message["reply_to_message"] = self._reply_target(chat, reply_id)
        markup = _inline_markup(params)
        if markup is not None:
            message["reply_markup"] = markup
        self._messages[chat["id"], message["message_id"]] = message
        return message

    def age(self, chat_id: int, message_id: int, seconds: float) -> None:
        """Make a message `seconds` older (its ``date``), as if sent that long ago.
        Raises KeyError for an unknown message."""
        message = self._messages[chat_id, message_id]
        message["date"] = int(message["date"] - seconds)

    async def _edit_message_text(self, params: JSON) -> JSON | bool:
        """Replace a bot message's text and inline keyboard (none given: removed), as
        Telegram does, and record it in ``edits``; unchanged text and keyboard is 400
        ``NOT_MODIFIED``."""
        if params.get("inline_message_id"):
            self._render(params, EDIT_TOO_LONG)
            return True
        chat = self._chat(params)
        message_id = int_param(params, "message_id") or 0
        old = self._messages.get((chat["id"], message_id))
        if old is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if old.get("from", {}).get("id") != self.bot_id:
            raise ApiError(400, "Bad Request: message can't be edited")
        text = self._render(params, EDIT_TOO_LONG)
        markup = _inline_markup(params)
        if text == old.get("text") and markup == old.get("reply_markup"):
            raise ApiError(400, NOT_MODIFIED)
        new = {k: v for k, v in old.items() if k != "reply_markup"}
        new.update(text=text, edit_date=int(time.time()))
        if markup is not None:
            new["reply_markup"] = markup
        self._messages[chat["id"], message_id] = new
        self.edits.append(Edit(chat["id"], message_id, text, time.monotonic()))
        return new

    async def _delete_message(self, params: JSON) -> bool:
        """Forget a message and record it in ``deleted``: the bot's anywhere, a user's
        only in a private chat (in a group the bot would need to be an admin)."""
        chat = self._chat(params)
        message_id = int_param(params, "message_id") or 0
        message = self._messages.get((chat["id"], message_id))
        if message is None:
            raise ApiError(400, "Bad Request: message to delete not found")
        if message.get("from", {}).get("id") != self.bot_id and chat["type"] != "private":
            raise ApiError(400, "Bad Request: message can't be deleted")
        if time.time() - message.get("date", time.time()) > DELETE_WINDOW_S:
            raise ApiError(400, "Bad Request: message can't be deleted for everyone")
        del self._messages[chat["id"], message_id]
        self.deleted.append(Deletion(chat["id"], message_id, time.monotonic()))
        return True

    async def _send_message_draft(self, params: JSON) -> bool:
        """Take a draft for a private chat the fake knows (unknown: 400 ``chat not
        found``; a group: 400 ``TEXTDRAFT_PEER_INVALID``) with a non-zero ``draft_id``;
        the text may be empty (Telegram shows "Thinking...") but not too long. It is
        recorded in ``drafts`` and makes no message."""
        chat = self._chats.get(int_param(params, "chat_id") or 0)
        if chat is None:
            raise ApiError(400, "Bad Request: chat not found")
        if chat["type"] != "private":
            raise ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        draft_id = int_param(params, "draft_id", 0)
        if not draft_id:
            raise ApiError(400, "Bad Request: draft_id must be non-zero")
        text = self._parsed(str(params.get("text") or ""), params)
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise ApiError(400, "Bad Request: message is too long")
        thread = int_param(params, "message_thread_id")
        self.drafts.append(Draft(chat["id"], draft_id, text, time.monotonic(), thread))
        return True

    # -- helpers ---------------------------------------------------------------
    def _upload(self, params: JSON, field: str, known: dict[str, Upload]) -> Upload:
        """The file a send method names in `field`: a multipart part (there, or
        by ``attach://<part>``) or the file_id of one it took before (`known`).
        Raises Telegram's ApiError for none, an unknown file_id, an empty file."""
        value = params.get(field)
        if isinstance(value, str) and value.startswith("attach://"):
            value = params.get(value.removeprefix("attach://"))
        if isinstance(value, str) and value:
            if value not in known:
                raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
            upload = known[value]
        elif isinstance(value, Upload):
            upload = value
        else:
            raise ApiError(400, f"Bad Request: there is no {field} in the request")
        if not upload.data:
            raise ApiError(400, "Bad Request: file must be non-empty")
        return upload

    def _render(self, params: JSON, too_long: str = "Bad Request: message is too long") -> str:
        """The text as Telegram would store it, or the ApiError Telegram would answer
        (``too_long``: the method's wording for a text over the limit)."""
        text = self._parsed(str(params.get("text") or ""), params)
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise ApiError(400, too_long)
        return text

    def _parsed(self, text: str, params: JSON) -> str:
        """`text` as Telegram reads it in the request's `parse_mode` (HTML: its
        tags become entities; bad HTML is an ApiError when `strict_html`)."""
        if str(params.get("parse_mode") or "").upper() == "HTML":
            try:
                return parse_html(text)
            except ValueError as e:
                if self.strict_html:
                    raise ApiError(400, f"Bad Request: can't parse entities: {e}") from None
        return text

    def _caption(self, params: JSON) -> str | None:
        """A document's caption as Telegram would store it (None when there is none)."""
        caption = params.get("caption")
        if caption is None or caption == "":
            return None
        text = self._parsed(str(caption), params)
        if utf16_len(text) > MAX_CAPTION_UTF16:
            raise ApiError(400, "Bad Request: message caption is too long")
        return text

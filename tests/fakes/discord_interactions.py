"""The interaction routes of the Discord fake (tests/fakes/discord_fake.py): the
callback that acknowledges an interaction, its follow-ups and its replies.

``POST /interactions/{id}/{token}/callback`` (204, or the callback object when
discord.py asks ``with_response``; a second ack → 400/40060), ``POST
/webhooks/{app}/{token}`` (a follow-up; needs an acked interaction; the message
only with ``wait``), ``GET``/``PATCH /webhooks/{app}/{token}/messages/{id or
@original}``; the webhook routes answer 401/50027 once the interaction is 15
minutes old, as on Discord (``push_interaction(age_s=...)`` makes an old one; its
callback is not checked). Each answer is recorded in ``interaction_replies``.
"""

from __future__ import annotations

import re
import time
from typing import Any

from aiohttp import web

from tests.fakes.discord_records import JSON, InteractionReply, Upload
from tests.fakes.discord_rest import (
    MAX_CONTENT,
    Rest,
    api_error,
    form_error,
    json_response,
    too_long,
)
from tests.fakes.discord_state import Interaction

INTERACTION_TTL_S = 15 * 60  # an interaction token's life (its follow-ups and edits)


class InteractionRoutes(Rest):
    """Answering an interaction: its callback, follow-ups, and replies."""

    def _webhook_interaction(self, m: re.Match[str]) -> Interaction | web.Response | None:
        """The interaction of a ``/webhooks/{app}/{token}`` path, None if unknown, or
        the 401 Discord gives once its token has expired."""
        it = self._interactions.get(m.group(2)) if int(m.group(1)) == self.app_id else None
        if it is not None and time.time() >= it.created + INTERACTION_TTL_S:
            return api_error(401, "Invalid Webhook Token", 50027)
        return it

    async def _callback(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        token = m.group(2)
        it = self._interactions.get(token)
        if it is None or it.id != int(m.group(1)):
            return api_error(404, "Unknown interaction", 10062)
        if it.acked:
            return api_error(400, "Interaction has already been acknowledged.", 40060)
        if not isinstance(body, dict) or "type" not in body:
            return form_error("type", "BASE_TYPE_REQUIRED", "This field is required")
        rtype, data = int(body["type"]), body.get("data") or {}
        if rtype == 4:
            problem = self._check_content(data, files)
            if problem is not None:
                return problem
        it.acked = True
        if rtype in (4, 5):
            it.original = self._bot_message(it.channel_id, data if rtype == 4 else {}, files)
            it.original["webhook_id"] = str(self.app_id)
            if rtype == 5:
                it.original["flags"] |= 128 | int(data.get("flags") or 0)  # LOADING
        self.interaction_replies.append(
            InteractionReply("callback", token, body, data.get("content"), rtype)
        )
        if request.query.get("with_response") not in ("1", "true", "True"):
            return json_response(204)
        flags = int(data.get("flags") or 0)
        answer: JSON = {
            "interaction": {
                "id": str(it.id),
                "type": 2,
                "response_message_loading": rtype == 5,
                "response_message_ephemeral": bool(flags & 64),
            },
            "resource": {"type": rtype},
        }
        if it.original is not None:
            answer["interaction"]["response_message_id"] = it.original["id"]
            answer["resource"]["message"] = it.original
        return json_response(200, answer)

    async def _followup(
        self, request: web.Request, m: re.Match[str], body: Any, files: tuple[Upload, ...]
    ) -> web.Response:
        token = m.group(2)
        it = self._webhook_interaction(m)
        if isinstance(it, web.Response):
            return it
        if it is None or not it.acked:
            return api_error(404, "Unknown Webhook", 10015)
        problem = self._check_content(body, files)
        if problem is not None:
            return problem
        msg = self._bot_message(it.channel_id, body, files)
        msg["webhook_id"] = str(self.app_id)
        self.interaction_replies.append(
            InteractionReply("followup", token, body, body.get("content"), files=files)
        )
        if request.query.get("wait") not in ("1", "true", "True"):
            return json_response(204)
        return json_response(200, msg)

    def _reply_message(self, m: re.Match[str]) -> JSON | web.Response | None:
        it = self._webhook_interaction(m)
        if it is None or isinstance(it, web.Response):
            return it
        if m.group(3) == "@original":
            return it.original
        return self._messages.get(int(m.group(3)))

    async def _get_reply(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        msg = self._reply_message(m)
        if isinstance(msg, web.Response):
            return msg
        if msg is None:
            return api_error(404, "Unknown Message", 10008)
        return json_response(200, msg)

    async def _edit_reply(
        self, request: web.Request, m: re.Match[str], body: Any, files: tuple[Upload, ...]
    ) -> web.Response:
        msg = self._reply_message(m)
        if isinstance(msg, web.Response):
            return msg
        if msg is None:
            return api_error(404, "Unknown Message", 10008)
        if not isinstance(body, dict):
            body = {}
        content = body.get("content")
        if len(content or "") > MAX_CONTENT:
            return too_long()
        self._apply_edit(msg, body)
        msg["flags"] &= ~128  # no longer LOADING
        self.interaction_replies.append(InteractionReply("edit", m.group(2), body, content))
        return json_response(200, msg)

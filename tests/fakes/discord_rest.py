"""The REST routes of the Discord fake but the interactions' (those are in
tests/fakes/discord_interactions.py; tests/fakes/discord_fake.py reads a request
and picks its route), and Discord's JSON answers and errors.

Routes: ``GET /users/@me``, ``GET /oauth2/applications/@me`` and ``GET
/applications/@me`` (the application, its ``flags`` from ``application_flags``: by
default the message content intent is on), ``GET /gateway[/bot]`` (``/bot`` adds
``shards``, the ``recommended_shards``),
``POST /users/@me/channels`` (a DM channel), ``GET /channels/{id}``,
``POST /channels/{id}/messages`` (JSON or multipart with ``payload_json`` and file
parts ``files[n]``, each recorded as an ``Upload`` with its bytes: the message's
``attachments`` carry their names, as ``payload_json``'s ``attachments`` give them by
id, and sizes; an image (PNG, JPEG) its type by its bytes, its width and height;
a file over ``max_upload_bytes``, 10 MiB as on Discord, → 413/40005; empty →
400/50006, content over 2000 characters → 400/50035, a reply to a message the fake
never saw → 400/50035, unknown channel → 404/10003; with ``enforce_nonce``, a
``nonce`` already used returns that message and creates none, as on Discord, whose
window is a few minutes: the fake's has no end), ``GET
/channels/{id}/messages/{id}``, ``PATCH /channels/{id}/messages/{id}`` (an edit of
content, embeds, components, answered with ``edited_timestamp`` and recorded as an
``Edit``: another user's message → 403/50005, content over 2000 → 400/50035, nothing
left → 400/50006, unknown → 404/10008), ``DELETE /channels/{id}/messages/{id}`` (204,
recorded as a ``Deletion`` in ``deleted``; from then on no route knows the id, a
reply to it → 400/50035, and ``message_text`` raises; another user's message →
403/50013, as for a bot without Manage Messages, or in a DM 403/50003; unknown channel
→ 404/10003; unknown message, or one of another channel → 404/10008; no MESSAGE_DELETE
event is sent, as edits send no MESSAGE_UPDATE), ``POST /channels/{id}/typing`` (204),
``GET``/``PUT /applications/{app}[/guilds/{guild}]/commands`` (bulk overwrite; ids
are kept per name). JSON answers carry exactly ``Content-Type: application/json``
(discord.py compares the header verbatim).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from tests.fakes.discord_records import JSON, Deletion, Edit, FakeFile, Sent, Upload
from tests.fakes.discord_state import DiscordState, iso_now
from tests.fakes.images import image_size, image_type

MAX_CONTENT = 2000
DEFAULT_ERRORS: dict[int, tuple[str, int]] = {
    400: ("400: Bad Request", 0),
    401: ("401: Unauthorized", 0),
    403: ("Missing Permissions", 50013),
    404: ("404: Not Found", 0),
    429: ("You are being rate limited.", 0),
    500: ("500: Internal Server Error", 0),
    502: ("502: Bad Gateway", 0),
    503: ("503: Service Unavailable", 0),
}


def json_response(
    status: int, obj: Any = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    if status == 204:
        return web.Response(status=204, headers=headers)
    return web.Response(
        status=status,
        body=json.dumps(obj).encode(),
        content_type="application/json",
        headers=headers,
    )


def api_error(status: int, message: str, code: int, **extra: Any) -> web.Response:
    return json_response(status, {"message": message, "code": code, **extra})


def too_long() -> web.Response:
    return form_error(
        "content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT} or fewer in length."
    )


def form_error(key: str, code: str, message: str) -> web.Response:
    errors = {key: {"_errors": [{"code": code, "message": message}]}}
    return api_error(400, "Invalid Form Body", 50035, errors=errors)


# A route: called with the request, the match of its path, the JSON body and the files.
Handler = Callable[
    [web.Request, "re.Match[str]", Any, tuple["Upload", ...]], Awaitable[web.Response]
]


class Rest(DiscordState):
    """The REST routes: the bot, the gateway's address, channels, messages, commands."""

    async def _get_me(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        return json_response(
            200, {**self._users[self.bot_id], "verified": True, "mfa_enabled": False}
        )

    async def _get_application(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        owner = self._user(1, "owner")
        return json_response(
            200,
            {
                "id": str(self.app_id),
                "name": self.bot_name,
                "description": "",
                "icon": None,
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": owner,
                "team": None,
                "verify_key": "0" * 64,
                "flags": self.application_flags,
                "summary": "",
                "bot": self._users[self.bot_id],
                "interactions_endpoint_url": None,
                "redirect_uris": [],
                "tags": [],
            },
        )

    async def _get_gateway(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        data: JSON = {"url": self.gateway_url}
        if m.group(1):
            data["shards"] = self.recommended_shards
            data["session_start_limit"] = {
                "total": 1000,
                "remaining": 1000,
                "reset_after": 0,
                "max_concurrency": 1,
            }
        return json_response(200, data)

    async def _create_dm(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        if not isinstance(body, dict) or "recipient_id" not in body:
            return form_error("recipient_id", "BASE_TYPE_REQUIRED", "This field is required")
        return json_response(200, self._dm_channel(int(body["recipient_id"])))

    async def _get_channel(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        channel = self._channels.get(int(m.group(1)))
        if channel is None:
            return api_error(404, "Unknown Channel", 10003)
        return json_response(200, channel)

    async def _get_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        msg = self._messages.get(int(m.group(2)))
        if msg is None or msg["channel_id"] != m.group(1):
            return api_error(404, "Unknown Message", 10008)
        return json_response(200, msg)

    async def _edit_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        """Edit one of the bot's messages (content, embeds, components; its attachments
        stay); an edit that leaves it empty → 400/50006. Recorded in ``edits``."""
        channel_id, message_id = int(m.group(1)), int(m.group(2))
        if channel_id not in self._channels:
            return api_error(404, "Unknown Channel", 10003)
        msg = self._messages.get(message_id)
        if msg is None or msg["channel_id"] != m.group(1):
            return api_error(404, "Unknown Message", 10008)
        if msg["author"]["id"] != str(self.bot_id):
            return api_error(403, "Cannot edit a message authored by another user", 50005)
        if not isinstance(body, dict):
            body = {}
        if len(body.get("content") or "") > MAX_CONTENT:
            return too_long()
        content, embeds = (body[k] if k in body else msg[k] for k in ("content", "embeds"))
        if not (content or embeds or msg["attachments"]):
            return api_error(400, "Cannot send an empty message", 50006)
        self._apply_edit(msg, body)
        self.edits.append(Edit(channel_id, message_id, msg["content"], body, time.monotonic()))
        return json_response(200, msg)

    async def _delete_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        """Delete one of the bot's messages (204); another user's → 403: 50013, as
        for a bot without Manage Messages, or 50003 in a DM, where no one can delete
        it. The message is forgotten by every route and recorded in ``deleted``."""
        channel_id, message_id = int(m.group(1)), int(m.group(2))
        channel = self._channels.get(channel_id)
        if channel is None:
            return api_error(404, "Unknown Channel", 10003)
        msg = self._messages.get(message_id)
        if msg is None or msg["channel_id"] != m.group(1):
            return api_error(404, "Unknown Message", 10008)
        if msg["author"]["id"] != str(self.bot_id):
            if channel["type"] == 1:
                return api_error(403, "Cannot execute action on a DM channel", 50003)
            return api_error(403, "Missing Permissions", 50013)
        del self._messages[message_id]
        self.deleted.append(Deletion(channel_id, message_id, time.monotonic()))
        return json_response(204)

    @staticmethod
    def _apply_edit(msg: JSON, body: JSON) -> None:
        """Set what an edit's ``body`` gives (null clears it) and ``edited_timestamp``."""
        for key, empty in (("content", ""), ("embeds", []), ("components", [])):
            if key in body:
                msg[key] = empty if body[key] is None else body[key]
        msg["edited_timestamp"] = iso_now()

    async def _trigger_typing(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        channel_id = int(m.group(1))
        if channel_id not in self._channels:
            return api_error(404, "Unknown Channel", 10003)
        self.typing.append(channel_id)
        return json_response(204)

    def _check_content(self, body: Any, files: tuple[Upload, ...]) -> web.Response | None:
        """The 400 (or 413) Discord gives for a message body, or None if it is fine."""
        if any(len(f.data) > self.max_upload_bytes for f in files):
            return api_error(413, "Request entity too large", 40005)
        if not isinstance(body, dict):
            return form_error("content", "BASE_TYPE_REQUIRED", "This field is required")
        content = body.get("content") or ""
        if len(content) > MAX_CONTENT:
            return too_long()
        if not (
            content or body.get("embeds") or files or body.get("sticker_ids") or body.get("poll")
        ):
            return api_error(400, "Cannot send an empty message", 50006)
        return None

    def _bot_message(self, channel_id: int, body: JSON, files: tuple[Upload, ...]) -> JSON:
        msg = self._message(
            self._next_id(), channel_id, body.get("content") or "", self._users[self.bot_id]
        )
        msg["embeds"] = body.get("embeds") or []
        msg["flags"] = int(body.get("flags") or 0)
        named = {
            str(a.get("id")): a.get("filename")
            for a in body.get("attachments") or []
            if isinstance(a, dict)
        }
        msg["attachments"] = [
            self._attachment(channel_id, _as_discord_keeps(named.get(str(u.index)), u))
            for u in files
        ]
        self._messages[int(msg["id"])] = msg
        return msg

    async def _create_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: tuple[Upload, ...]
    ) -> web.Response:
        channel_id = int(m.group(1))
        if channel_id not in self._channels:
            return api_error(404, "Unknown Channel", 10003)
        problem = self._check_content(body, files)
        if problem is not None:
            return problem
        nonce = str(body["nonce"]) if body.get("enforce_nonce") and body.get("nonce") else None
        if nonce is not None and nonce in self._nonces:
            return json_response(200, self._nonces[nonce])
        ref = body.get("message_reference")
        referenced = None
        if ref and ref.get("message_id"):
            referenced = self._messages.get(int(ref["message_id"]))
            if referenced is None and ref.get("fail_if_not_exists", True):
                return form_error("message_reference", "REPLIES_UNKNOWN_MESSAGE", "Unknown message")
        msg = self._bot_message(channel_id, body, files)
        if ref and ref.get("message_id"):
            msg["type"] = 19
            msg["message_reference"] = {
                "type": ref.get("type", 0),
                "message_id": str(ref["message_id"]),
                "channel_id": str(ref.get("channel_id") or channel_id),
                **({"guild_id": str(ref["guild_id"])} if ref.get("guild_id") else {}),
            }
            msg["referenced_message"] = referenced
        if body.get("nonce"):
            msg["nonce"] = str(body["nonce"])
        if nonce is not None:
            self._nonces[nonce] = msg
        self._sent.append(Sent(channel_id, int(msg["id"]), msg["content"], body, files))
        return json_response(200, msg)

    async def _get_commands(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        scope = self._command_scope(m)
        if isinstance(scope, web.Response):
            return scope
        return json_response(200, self.commands.get(scope, []))

    async def _put_commands(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        scope = self._command_scope(m)
        if isinstance(scope, web.Response):
            return scope
        if not isinstance(body, list):
            return form_error("_", "LIST_TYPE_CONVERT", "Must be a list.")
        ids = {c["name"]: c["id"] for c in self.commands.get(scope, [])}
        registered = []
        for command in body:
            entry = {
                "type": 1,
                "description": "",
                "options": [],
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                **command,
                "id": ids.get(command.get("name")) or str(self._next_id()),
                "application_id": str(self.app_id),
                "version": str(self._next_id()),
            }
            if scope is not None:
                entry["guild_id"] = str(scope)
            registered.append(entry)
        self.commands[scope] = registered
        return json_response(200, registered)

    def _command_scope(self, m: re.Match[str]) -> int | web.Response | None:
        """The guild id of a commands path (None: global), or the 403 Discord gives."""
        guild_id = int(m.group(2)) if m.group(2) else None
        if int(m.group(1)) != self.app_id or (
            guild_id is not None and guild_id not in self._guilds
        ):
            return api_error(403, "Missing Access", 50001)
        return guild_id


def _as_discord_keeps(name: str | None, upload: Upload) -> FakeFile:
    """An uploaded file as Discord keeps it: named as ``payload_json`` names it,
    and an image (PNG, JPEG) typed by its bytes, with its width and height
    (Discord reads them to show it; other files keep the type they came with)."""
    size = image_size(upload.data)
    mime = image_type(upload.data) if size is not None else None
    width, height = size if size is not None else (None, None)
    return FakeFile(name or upload.filename, upload.data, mime or upload.content_type,
                    width=width, height=height)  # fmt: skip

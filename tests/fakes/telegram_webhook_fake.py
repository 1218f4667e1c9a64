"""The webhook side of the Bot API fake (tests/fakes/telegram_fake.py): setWebhook,
deleteWebhook, getWebhookInfo, and the pusher that posts queued updates to the URL.

setWebhook takes ``url`` (an empty one deletes the webhook, as on Telegram; https,
or http on loopback since the fake has no TLS, else 400 ``bad webhook: An HTTPS
URL must be provided for webhook``), ``secret_token`` (1-256 of ``A-Z a-z 0-9 _
-``, else 400), ``allowed_updates`` (shared with getUpdates), ``max_connections``
and ``drop_pending_updates``; the webhook is in ``webhook``. deleteWebhook removes
it and the last error (the updates stay, for getUpdates, unless
``drop_pending_updates``). getWebhookInfo answers ``url`` (``""`` with none),
``has_custom_certificate`` false, ``pending_update_count``, and with a webhook
``max_connections``, ``allowed_updates`` when set, and ``last_error_date`` /
``last_error_message`` after a failed post. While a webhook is set, queued
updates are POSTed to its URL as JSON (``Content-Type: application/json``) with
the ``X-Telegram-Bot-Api-Secret-Token`` header when a secret was given: oldest
first, one at a time, the next after the answer. A 2xx answer delivers the
update; any other answer or a connection failure is an error (``Wrong response
from the webhook: 403 Forbidden``, ``Connection refused``, ``Read timeout
expired``), the post is tried ``push_tries`` (3) times in all, ``push_retry_s``
(0.05 s) apart, and then the update waits, pending, for the next queued update or
setWebhook (Telegram's own retries, for minutes, made short). Every post is in
``pushes``. ``post_to_webhook`` posts an update to the webhook directly, with the
secret a test gives (a wrong one, none), and answers the HTTP status.
``free_port()`` picks a loopback port for a webhook server under test (PTB's
cannot listen on port 0 and say which port it got).

What PTB 22.8 does against it (checked): ``updater.start_webhook`` sends one
setWebhook (``url``, ``max_connections="40"``, and ``secret_token``,
``allowed_updates``, ``drop_pending_updates`` when given) and no deleteWebhook
unless dropping; then its tornado server answers 200 to a post of an update (once
queued, before it is handled), 403 to one with a missing or wrong secret or
another content type (not handled), and 400 to a body that is no update.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from urllib.parse import urlsplit

import aiohttp

from tests.fakes.telegram_http import ApiError, int_param, is_true
from tests.fakes.telegram_records import JSON, Push, Webhook
from tests.fakes.telegram_state import TelegramState

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
PUSH_TIMEOUT_S = 5.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a webhook server a test starts (PTB's
    cannot listen on port 0 and say which port it got)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class WebhookSide(TelegramState):
    """setWebhook, deleteWebhook, getWebhookInfo, and posting to the webhook."""

    async def post_to_webhook(self, update: JSON, *, secret: str | None) -> int:
        """Post ``update`` to the webhook now, as Telegram would but with ``secret`` in
        the header (None: no header), and answer the HTTP status (0: no answer). Not
        queued, not in ``pushes``. Raises RuntimeError without a webhook."""
        if self.webhook is None:
            raise RuntimeError("post_to_webhook: no webhook is set (setWebhook first)")
        update = {"update_id": self._next_update_id, **update}
        self._next_update_id = max(self._next_update_id, int(update["update_id"]) + 1)
        status, _ = await self._post(self.webhook.url, update, secret)
        return status

    # -- posting to the webhook ------------------------------------------------
    async def _push_loop(self) -> None:
        """While a webhook is set, post the pending updates to it, oldest first, one
        at a time; an update that fails ``push_tries`` posts waits for the next queued
        update or webhook change. Runs from ``start`` to ``stop``."""
        while True:
            self._push_wake.clear()
            hook = self.webhook
            if hook is not None:
                self._updates = [u for u in self._updates if self._wanted(u)]
            if hook is None or not self._updates or not await self._push(hook, self._updates[0]):
                await self._push_wake.wait()

    async def _push(self, hook: Webhook, update: JSON) -> bool:
        """Post ``update`` until it is taken (True) or ``push_tries`` posts failed, or
        the webhook changed meanwhile (False); each post in ``pushes``."""
        for attempt in range(self.push_tries):
            if attempt:
                await asyncio.sleep(self.push_retry_s)
            if self.webhook is not hook:
                return False
            status, error = await self._post(hook.url, update, hook.secret_token or None)
            self.pushes.append(Push(int(update["update_id"]), hook.url, time.monotonic(),
                                    status, error))  # fmt: skip
            if error is None:
                self._updates = [u for u in self._updates if u is not update]
                self._notify()
                return True
            self._last_error = (int(time.time()), error)
            self._notify()
        return False

    async def _post(self, url: str, update: JSON, secret: str | None) -> tuple[int, str | None]:
        """POST ``update`` as JSON with ``secret`` in the header (None: none); the
        status (0: no answer) and the error Telegram would record (None: a 2xx)."""
        if self._http is None:
            raise RuntimeError("FakeTelegram posts updates only while running")
        headers = {SECRET_HEADER: secret} if secret is not None else {}
        try:
            async with self._http.post(url, json=update, headers=headers) as response:
                await response.read()
        except aiohttp.ClientConnectorError:
            return 0, "Connection refused"
        except TimeoutError:
            return 0, "Read timeout expired"
        except aiohttp.ClientError as e:
            return 0, f"Connection failed: {type(e).__name__}"
        if 200 <= response.status < 300:
            return response.status, None
        return (
            response.status,
            f"Wrong response from the webhook: {response.status} {response.reason}",
        )

    # -- the methods -------------------------------------------------------------
    async def _delete_webhook(self, params: JSON) -> bool:
        if is_true(params.get("drop_pending_updates")):
            self._updates.clear()
        self.webhook = None
        self._last_error = None
        self._push_wake.set()
        return True

    async def _set_webhook(self, params: JSON) -> bool:
        """Set the webhook (an empty ``url`` deletes it) and have the pending updates
        posted to it; a set one ends a waiting getUpdates with 409."""
        url = str(params.get("url") or "")
        if not url:
            return await self._delete_webhook(params)
        parts = urlsplit(url)
        if parts.scheme != "https" and not (
            parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS
        ):
            raise ApiError(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        secret = str(params.get("secret_token") or "")
        if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        connections = int_param(params, "max_connections", 40) or 40
        if not 1 <= connections <= 100:
            raise ApiError(400, "Bad Request: invalid max_connections specified")
        allowed = params.get("allowed_updates")
        if isinstance(allowed, list):
            self._allowed = frozenset(allowed) or None
        if is_true(params.get("drop_pending_updates")):
            self._updates.clear()
        self.webhook = Webhook(url, secret, connections)
        self._push_wake.set()
        self._notify()
        return True

    async def _get_webhook_info(self, params: JSON) -> JSON:
        hook = self.webhook
        info: JSON = {
            "url": hook.url if hook is not None else "",
            "has_custom_certificate": False,
            "pending_update_count": sum(1 for u in self._updates if self._wanted(u)),
        }
        if hook is not None:
            info["max_connections"] = hook.max_connections
            if self._allowed is not None:
                info["allowed_updates"] = sorted(self._allowed)
        if self._last_error is not None:
            info["last_error_date"], info["last_error_message"] = self._last_error
        return info

"""Telegram's webhook (`Webhook`: Telegram posts each update to a URL of ours),
and meeting another process that takes this token's updates (`AnotherProcess`).
adapters/telegram_adapter.py starts a `WebhookServer` in place of polling.

Our server (adapters/telegram_posts.py, tornado as PTB's, which it replaces)
listens on `host`:`port` for posts to `path` (a proxy in front takes Telegram's
HTTPS at `url` and forwards them here), then `start` calls setWebhook with `url`,
`allowed_updates=["message"]`, the secret and `drop_pending_updates=False`. It
answers 403 to a post without the `X-Telegram-Bot-Api-Secret-Token` header or
with another value, and to a body that is not `application/json`, before the
body is read; 413 to a body over `max_body`; and closes a connection that stalls
`timeout_s`. It answers 200 once the update is queued, and the Application
handles it as a polled one: handlers, sending, streaming, dedupe and commands are
the same in both modes. `stop` deletes the webhook at Telegram and closes the server (
pending updates kept): Telegram holds the updates that come while the
process is down (up to 24 h) either way, and the next start's setWebhook has them
posted, so a restart loses nothing; deleting it lets a poller with this token (the
config switched back to polling, or one waiting on a 409, below) take the updates
at once, and Telegram stops posting to a process that is gone. After a crash the
webhook stays set, and the next start (or a poller's start) sets it again or
deletes it.

Liveness with a webhook: the last update received, setWebhook's answer, and a
getWebhookInfo asked every `WEBHOOK_CHECK_S` (60 s) that shows our URL; one that
shows no webhook or another URL is no sign of life, since the updates go
elsewhere (sends are not counted: they succeed for a bot that hears nothing).
When getWebhookInfo reports an error newer than the start and than the last one
seen (Telegram could not reach the URL, the proxy answered 502), one
`telegram.webhook_error` line gives Telegram's `last_error_message`. Telegram
retries a failed post and dates each failure, so an outage shows a new error at
most checks: the same message is logged again only `ERROR_QUIET_S` (10 min) after
its last line; another message at once.

One process per token: Telegram gives each update to one taker. Two pollers end
each other's long polls with 409 `Conflict`; PTB's polling start deletes any
webhook (its bootstrap calls deleteWebhook), so a poller started beside a
webhook process takes its updates silently, and getUpdates answers 409 while a
webhook is set. So the webhook check sets our webhook again when it finds it
deleted (the webhook process wins, and the poller meets 409s from then on), and
leaves a webhook set to another URL alone (the last setWebhook wins). Each
process that meets another (a 409 on getUpdates, our webhook deleted or
replaced) logs one `adapter.error` line, `reason` `ANOTHER_PROCESS`, for a run
of such meetings: again only after `CONFLICT_QUIET_S` without one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from telegram import Bot, WebhookInfo
from telegram.error import TelegramError
from telegram.ext import Application

from adapters.telegram_posts import UpdatePosts
from bot.types import AdapterStartError

log = structlog.get_logger(__name__)

WEBHOOK_CHECK_S = 60.0  # how often getWebhookInfo is asked, with a webhook
CONFLICT_QUIET_S = 600.0  # a run of meetings with another process ends after this long without
ERROR_QUIET_S = 600.0  # the same delivery error is logged again after this long
MAX_BODY = 1 << 20  # bytes: an update is a few kB
TIMEOUT_S = 10.0  # a connection's headers, and then its body, must all come within this
ANOTHER_PROCESS = (
    "another process polls with this token or takes its updates by webhook (a second "
    "soulbot, or another program using this bot): only one process may run the Telegram "
    "adapter with a token, as Telegram gives each update to one of them; stop the other, "
    "or give this bot a token of its own (BotFather's /token)"
)


@dataclass(frozen=True)
class Webhook:
    """Where Telegram posts the updates (`adapters.telegram.webhook`): `url` is
    the public HTTPS URL given to Telegram, which a proxy forwards to `path` on
    `host`:`port`, where this process listens; `secret_token` comes with every
    post and is checked on each. `check_every_s` is how often getWebhookInfo is
    asked; `max_body` (bytes) and `timeout_s` bound each post (see
    adapters/telegram_posts.py). Raises ValueError without a secret: the server
    would take any post."""

    url: str
    host: str
    port: int
    path: str = "/telegram"
    secret_token: str = field(default="", repr=False)
    check_every_s: float = WEBHOOK_CHECK_S
    max_body: int = MAX_BODY
    timeout_s: float = TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.secret_token:
            raise ValueError("a Telegram webhook needs a secret_token")


class AnotherProcess:
    """Meetings with another process that takes this token's updates: one line
    for a run of them, again only after `CONFLICT_QUIET_S` without one."""

    def __init__(self, adapter: str) -> None:
        self._adapter = adapter
        self._met_other: float | None = None  # when another process was last met (monotonic)

    def met(self, stage: str, error: str) -> None:
        now = time.monotonic()
        quiet = self._met_other is None or now - self._met_other > CONFLICT_QUIET_S
        self._met_other = now
        if quiet:
            log.error("adapter.error", adapter=self._adapter, stage=stage, reason=ANOTHER_PROCESS,
                      error=error)  # fmt: skip


class DeliveryErrors:
    """Telegram's errors posting to the webhook, as getWebhookInfo dates them:
    news when newer than `after` (the start) and the last one seen; one line for
    a run of the same error, again `ERROR_QUIET_S` after its last line."""

    def __init__(self) -> None:
        self.after = 0.0  # errors dated up to this (Unix time) are not news
        self._logged: tuple[str, float] | None = None  # the last line: error, when (monotonic)

    def seen(self, url: str, info: WebhookInfo) -> None:
        when = info.last_error_date
        if when is None or when.timestamp() <= self.after:
            return
        self.after = when.timestamp()
        error, now = info.last_error_message or "", time.monotonic()
        last = self._logged
        if last is not None and last[0] == error and now - last[1] <= ERROR_QUIET_S:
            return
        self._logged = (error, now)
        log.warning("telegram.webhook_error", url=url, error=error, at=when.isoformat(),
                    pending=info.pending_update_count)  # fmt: skip


class WebhookServer:
    """A started adapter's webhook: served (`UpdatePosts`) and set at Telegram
    (`start`), checked with getWebhookInfo every `check_every_s` until `stop`
    deletes it. `answered` is called for each sign of life."""

    def __init__(
        self,
        hook: Webhook,
        *,
        allowed_updates: Sequence[str],
        answered: Callable[[], None],
        another: AnotherProcess,
        adapter: str,
    ) -> None:
        self._hook = hook
        self._allowed_updates = allowed_updates
        self._answered = answered
        self._another = another
        self._adapter = adapter
        self._watch: asyncio.Task[None] | None = None  # the webhook check
        self._errors = DeliveryErrors()
        self._posts: UpdatePosts | None = None  # from start to stop

    @property
    def serving(self) -> bool:
        """Whether the server takes posts (started, not stopped)."""
        return self._posts is not None and self._posts.serving

    async def start(self, app: Application[Any, Any, Any, Any, Any, Any]) -> None:
        """Serve the webhook, set it at Telegram, and start its check. Raises
        AdapterStartError when the address is taken or Telegram refuses it."""
        hook = self._hook
        self._errors.after = int(time.time()) - 0.5  # Telegram's dates are whole seconds
        posts = UpdatePosts(app.bot, app.update_queue, path=hook.path, secret=hook.secret_token,
                            max_body=hook.max_body, timeout_s=hook.timeout_s)  # fmt: skip
        try:
            posts.listen(hook.host, hook.port)
        except OSError as exc:
            raise AdapterStartError(
                f"telegram: cannot listen for the webhook on {hook.host}:{hook.port} "
                f"(adapters.telegram.webhook.listen): {exc.strerror or exc}"
            ) from None
        try:
            await app.bot.set_webhook(hook.url, allowed_updates=self._allowed_updates,
                                      secret_token=hook.secret_token, max_connections=40,
                                      drop_pending_updates=False)  # fmt: skip
        except TelegramError as exc:
            await posts.close()
            raise AdapterStartError(
                f"telegram: Telegram refused the webhook {hook.url} "
                f"(adapters.telegram.webhook.url): {exc}"
            ) from None
        self._posts = posts
        self._answered()  # setWebhook was answered
        self._watch = asyncio.create_task(self._watch_webhook(app.bot), name="telegram.webhook")

    async def stop(self, bot: Bot) -> None:
        """End the check, delete the webhook at Telegram (pending updates kept
        for the next start) and close the server. Idempotent."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        posts, self._posts = self._posts, None
        if posts is None:
            return
        try:
            await bot.delete_webhook(drop_pending_updates=False)
        except TelegramError as exc:  # it stays set: Telegram keeps the updates all the same
            log.warning("adapter.error", adapter=self._adapter, stage="delete_webhook",
                        error=f"{type(exc).__name__}: {exc}")  # fmt: skip
        await posts.close()

    async def _watch_webhook(self, bot: Bot) -> None:
        """Ask getWebhookInfo every `check_every_s` until cancelled (by `stop`);
        a failed check is one line and the next goes on."""
        while True:
            await asyncio.sleep(self._hook.check_every_s)
            try:
                await self._check_webhook(bot)
            except Exception as exc:  # one check never ends the watch
                log.warning("adapter.error", adapter=self._adapter, stage="webhook_info",
                            error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    async def _check_webhook(self, bot: Bot) -> None:
        """One getWebhookInfo: ours (heard; a new delivery error logged), deleted
        (another process polls: set again), or another URL (left to it)."""
        hook = self._hook
        info = await bot.get_webhook_info()
        if info.url and info.url != hook.url:
            self._another.met("webhook", f"getWebhookInfo: the webhook is set to {info.url}, "
                                         f"not {hook.url}; left to it")  # fmt: skip
            return
        if not info.url:
            self._another.met("webhook", "getWebhookInfo: the webhook was deleted (a poller's "
                                         "start deletes it); set again")  # fmt: skip
            await bot.set_webhook(hook.url, allowed_updates=self._allowed_updates,
                                  secret_token=hook.secret_token,
                                  drop_pending_updates=False)  # fmt: skip
            self._answered()
            return
        self._answered()
        self._errors.seen(hook.url, info)

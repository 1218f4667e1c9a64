"""Telegram by webhook: the real python-telegram-bot's webhook server, posted to by
the Bot API fake, the real runtime against the model fake."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from telegram import WebhookInfo

from adapters import telegram_webhook
from adapters.telegram_adapter import ANOTHER_PROCESS, TelegramAdapter, Webhook
from bot.chat.commands import MENU
from bot.cli.serve import _adapters
from bot.types import AdapterStartError
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.telegram_fake import FakeTelegram, free_port
from tests.fakes.telegram_webhook_fake import SECRET_HEADER
from tests.kit import Inbox, capture_logs, delivering, make_config, serving, user_texts

pytestmark = pytest.mark.timeout(30)

ADMIN = 1
GROUP = -100
SECRET = "s3cret-token_1"
QUICK_S = 0.05  # the webhook check, in tests


def hook(port: int | None = None, *, url: str | None = None, **limits: Any) -> Webhook:
    """A webhook on a free loopback port; `url` (where Telegram posts) defaults to it;
    `limits`: `max_body`, `timeout_s`."""
    port = free_port() if port is None else port
    url = url or f"http://127.0.0.1:{port}/telegram"
    return Webhook(url, "127.0.0.1", port, "/telegram", SECRET, check_every_s=QUICK_S, **limits)


def webhook_adapter(tg: FakeTelegram, webhook: Webhook) -> TelegramAdapter:
    return TelegramAdapter(tg.token, tg.base_url, MENU, webhook=webhook)


@contextmanager
def process(name: str) -> Iterator[None]:
    """Log lines of what starts inside carry `process=name` (PTB's tasks and ours
    take the context they were started in): two adapters, told apart."""
    with structlog.contextvars.bound_contextvars(process=name):
        yield


def another_process_lines(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "adapter.error" and e.get("reason")]


def conflicts(tg: FakeTelegram) -> int:
    """How many getUpdates were answered 409."""
    return [c.status for c in tg.calls_of("getUpdates")].count(409)


async def refused(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:`port` any more."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


def post_head(secret: str | None, length: int | None) -> bytes:
    """A post's request line and headers, as a client that is not Telegram may send
    them: `secret` in the header (None: none), a `length` (None: chunked)."""
    lines = ["POST /telegram HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines.append("Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}")
    if secret is not None:
        lines.append(f"{SECRET_HEADER}: {secret}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@asynccontextmanager
async def raw(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A bare connection to the webhook server, closed after."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def answer(reader: asyncio.StreamReader) -> bytes:
    """What the server sends until it closes the connection, which it must within 5 s."""
    async with asyncio.timeout(5):
        return await reader.read()


@asynccontextmanager
async def telegram(tmp_path: Path) -> AsyncIterator[tuple[FakeTelegram, FakeAnthropic, Webhook]]:
    async with FakeTelegram() as tg, FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, f"admins: {{telegram: [{ADMIN}]}}\n")
        webhook = hook()
        async with serving(config, [webhook_adapter(tg, webhook)]):
            yield tg, model, webhook


def test_a_webhook_keeps_its_secret_out_of_sight_and_needs_one() -> None:
    assert SECRET not in repr(hook())
    with pytest.raises(ValueError, match="secret_token"):
        Webhook("https://bot.example.org/telegram", "127.0.0.1", 8443)


async def test_a_dm_and_a_group_message_come_by_webhook_and_are_answered(
    tmp_path: Path,
) -> None:
    async with telegram(tmp_path) as (tg, model, webhook):
        asked = tg.push_message(ADMIN, "hello by webhook", user_id=ADMIN)
        tg.push_message(GROUP, "hi @soul_test_bot how are you", user_id=5, chat_type="supergroup")
        sent = await tg.wait_sent(2)
    [to_dm] = [m for m in sent if m["chat_id"] == str(ADMIN)]
    [to_group] = [m for m in sent if m["chat_id"] == str(GROUP)]
    assert to_dm["text"].endswith("hello by webhook")
    assert to_dm["reply_parameters"]["message_id"] == asked
    assert to_group["text"].endswith("Ann: hi how are you")  # the mention is taken out
    asked_model = sorted(user_texts(r)[-1] for r in model.requests)
    assert asked_model[0].endswith("Ann: hi how are you") and asked_model[1] == "hello by webhook"
    [setting] = tg.calls_of("setWebhook")
    assert setting.params == {"url": webhook.url, "secret_token": SECRET,
                              "allowed_updates": ["message"], "drop_pending_updates": "false",
                              "max_connections": "40"}  # fmt: skip
    assert [p.status for p in tg.pushes] == [200, 200]
    assert tg.calls_of("getUpdates") == []
    assert [c["command"] for c in tg.commands] == [name for name, _ in MENU]


async def test_the_same_update_posted_twice_is_answered_once(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        message = {"message_id": 77, "date": 1, "text": "once please",
                   "chat": {"id": ADMIN, "type": "private"},
                   "from": {"id": ADMIN, "is_bot": False, "first_name": "Ann"}}  # fmt: skip
        tg.push_update({"message": message})
        tg.push_update({"message": message})
        tg.push_message(ADMIN, "next", user_id=ADMIN)
        sent = await tg.wait_sent(2)
    assert len(model.requests) == 2 and len(tg.pushes) == 3
    assert user_texts(model.requests[0])[-1].endswith("once please")
    assert sent[-1]["text"].endswith("next")


async def test_a_post_without_the_secret_is_refused_and_not_delivered() -> None:
    async with FakeTelegram() as tg:
        adapter = webhook_adapter(tg, hook())
        async with delivering(adapter) as inbox:
            assert adapter.connected()
            heard = adapter.last_seen()
            assert heard is not None
            message = {"message_id": 5, "date": 1, "text": "let me in",
                       "chat": {"id": 66, "type": "private"},
                       "from": {"id": 66, "is_bot": False, "first_name": "Mallory"}}  # fmt: skip
            assert await tg.post_to_webhook({"message": message}, secret="guessed") == 403
            assert await tg.post_to_webhook({"message": message}, secret=None) == 403
            tg.push_message(ADMIN, "the real one", user_id=ADMIN)
            got = await inbox.one()
            seen = adapter.last_seen()
            assert seen is not None and seen >= heard
    assert got.text == "the real one"
    assert [i.text for i in inbox.got] == ["the real one"]


@pytest.mark.parametrize("secret", [None, "guessed"])
async def test_a_post_without_the_secret_is_refused_before_its_body_comes(
    secret: str | None,
) -> None:
    async with FakeTelegram() as tg:
        webhook = hook()
        async with delivering(webhook_adapter(tg, webhook)), raw(webhook.port) as (reader, writer):
            writer.write(post_head(secret, 100 * 2**20))  # and never the 100 MB it announces
            refused = await answer(reader)  # and the connection closed
    assert refused.startswith(b"HTTP/1.1 403 ")


async def test_a_body_over_the_cap_is_refused() -> None:
    async with FakeTelegram() as tg:
        webhook = hook(max_body=1000)
        async with delivering(webhook_adapter(tg, webhook)):
            async with raw(webhook.port) as (reader, writer):
                writer.write(post_head(SECRET, 1001))  # announced: refused before it comes
                announced = await answer(reader)
            async with raw(webhook.port) as (reader, writer):
                writer.write(post_head(SECRET, None))  # chunked: refused once past the cap
                for _ in range(3):
                    writer.write(b"200\r\n" + b" " * 512 + b"\r\n")
                streamed = await answer(reader)
            tg.push_message(ADMIN, "small enough", user_id=ADMIN)
            await tg.wait_for(lambda f: bool(f.pushes), what="a post")
            assert tg.pushes[0].status == 200
    assert announced.startswith(b"HTTP/1.1 413 ")
    assert streamed.startswith(b"HTTP/1.1 400 ")


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /telegram HTTP/1.1\r\nHost: 127.0.0.1\r\n", post_head(SECRET, 50)],
    ids=["nothing", "half its headers", "no body"],
)
async def test_a_connection_that_stalls_is_closed_within_the_timeout(sent: bytes) -> None:
    async with FakeTelegram() as tg:
        webhook = hook(timeout_s=0.2)
        async with delivering(webhook_adapter(tg, webhook)), raw(webhook.port) as (reader, writer):
            writer.write(sent)
            assert b" 200 " not in await answer(reader)


async def test_stop_closes_the_server_and_a_restart_gets_what_came_meanwhile() -> None:
    async with FakeTelegram() as tg:
        webhook = hook()
        adapter = webhook_adapter(tg, webhook)
        async with delivering(adapter) as inbox:
            assert adapter.notes()[-1] == f"Telegram: updates come by webhook, {webhook.url}"
            tg.push_message(ADMIN, "before", user_id=ADMIN)
            await inbox.one()
        assert not adapter.connected()
        assert await refused(webhook.port)
        assert tg.webhook is None  # deleted at stop, the updates kept
        assert tg.calls_of("deleteWebhook")[-1].params == {"drop_pending_updates": "false"}
        tg.push_message(ADMIN, "while down", user_id=ADMIN)
        assert len(tg.pending_updates) == 1
        async with delivering(webhook_adapter(tg, webhook)) as again:
            got = await again.one()
    assert got.text == "while down"


async def test_a_webhook_that_cannot_start_says_why() -> None:
    async with FakeTelegram() as tg:
        plain_http = hook(url="http://bot.example.org/telegram")  # Telegram wants HTTPS
        adapter = webhook_adapter(tg, plain_http)
        with pytest.raises(
            AdapterStartError, match=r"refused the webhook .*webhook\.url.*https url"
        ):
            await adapter.start(Inbox().deliver)
        await adapter.close()
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            busy = hook(taken.getsockname()[1])
            adapter = webhook_adapter(tg, busy)
            with pytest.raises(AdapterStartError, match=r"cannot listen .*webhook\.listen"):
                await adapter.start(Inbox().deliver)
            await adapter.close()
        assert not adapter.connected()


async def test_telegram_failing_to_reach_the_url_is_one_line() -> None:
    closed = f"http://127.0.0.1:{free_port()}/telegram"  # a proxy that forwards nowhere
    with capture_logs() as logs:
        async with FakeTelegram() as tg:
            tg.push_retry_s = 1.1  # each failed post dated a second apart, as in an outage
            adapter = webhook_adapter(tg, hook(url=closed))
            async with delivering(adapter):
                tg.push_message(ADMIN, "lost in the proxy", user_id=ADMIN)
                await tg.wait_for(lambda f: len(f.pushes) == f.push_tries, what="every post")
                checks = len(tg.calls_of("getWebhookInfo"))
                await tg.wait_for(lambda f: len(f.calls_of("getWebhookInfo")) >= checks + 2,
                                  what="two more checks")  # fmt: skip
                assert adapter.connected()
    assert tg.pushes[-1].t - tg.pushes[0].t >= 2  # the error's date (whole seconds) moved on
    [line] = [e for e in logs if e["event"] == "telegram.webhook_error"]
    assert line["error"] == "Connection refused" and line["url"] == closed
    assert line["pending"] == 1 and line["log_level"] == "warning"


def test_a_delivery_error_is_logged_again_when_it_changes_or_after_a_quiet_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(telegram_webhook.time, "monotonic", lambda: clock[0])
    errors = telegram_webhook.DeliveryErrors()
    errors.after = 100.0

    def info(date: int, error: str) -> WebhookInfo:
        when = datetime.fromtimestamp(date, UTC)
        return WebhookInfo("https://bot.example.org/t", False, 1, last_error_date=when,
                           last_error_message=error)  # fmt: skip

    with capture_logs() as logs:
        errors.seen("u", info(100, "Connection refused"))  # before the start
        errors.seen("u", info(101, "Connection refused"))
        errors.seen("u", info(101, "Connection refused"))  # the same error, asked again
        errors.seen("u", info(160, "Connection refused"))  # Telegram's retry, a minute on
        errors.seen("u", info(220, "Wrong response from the webhook: 502 Bad Gateway"))
        clock[0] += telegram_webhook.ERROR_QUIET_S
        errors.seen("u", info(280, "Wrong response from the webhook: 502 Bad Gateway"))  # quiet
        clock[0] += 1
        errors.seen("u", info(340, "Wrong response from the webhook: 502 Bad Gateway"))
    lines = [(e["error"][:10], e["at"][11:19]) for e in logs]
    assert lines == [("Connection", "00:01:41"), ("Wrong resp", "00:03:40"),
                     ("Wrong resp", "00:05:40")]  # fmt: skip


async def test_a_poller_meets_the_webhook_process_once_and_takes_over_when_it_stops() -> None:
    with capture_logs() as logs:
        async with FakeTelegram() as tg:
            to_web, to_poller = Inbox(), Inbox()
            with process("webhook"):
                web = webhook_adapter(tg, hook())
                await web.start(to_web.deliver)
            with process("poller"):
                poller = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=5)
                await poller.start(to_poller.deliver)
            try:
                # The poller's start deletes the webhook; the check sets it again.
                await tg.wait_for(lambda f: conflicts(f) >= 2, what="two refused polls")
                tg.push_message(ADMIN, "to the webhook", user_id=ADMIN)
                assert (await to_web.one()).text == "to the webhook"
                await web.stop()
                await web.close()
                tg.push_message(ADMIN, "to the poller", user_id=ADMIN)
                assert (await to_poller.one()).text == "to the poller"
            finally:
                await poller.stop()
                await poller.close()
    lines = another_process_lines(logs)  # the poller's 409s all handled: it polled after them
    assert {e["process"]: e["stage"] for e in lines} == {"webhook": "webhook", "poller": "polling"}
    assert len(lines) == 2 and all(e["reason"] == ANOTHER_PROCESS for e in lines)
    assert "only one process may run the Telegram adapter" in lines[0]["reason"]
    [polled] = [e for e in lines if e["stage"] == "polling"]
    assert "can't use getUpdates method while webhook is active" in polled["error"]
    assert [i.text for i in to_poller.got] == ["to the poller"]


async def test_two_pollers_say_so_once_each_even_after_an_update() -> None:
    with capture_logs() as logs:
        async with FakeTelegram() as tg:
            inbox = Inbox()
            with process("first"):
                first = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=5)
                await first.start(inbox.deliver)
            await tg.wait_for(lambda f: f.waiting_polls == 1)
            with process("second"):
                second = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=5)
                await second.start(inbox.deliver)
            try:
                await tg.wait_for(lambda f: conflicts(f) >= 2, what="a conflict each")
                tg.push_message(ADMIN, "someone takes it", user_id=ADMIN)
                await inbox.one()  # to the one polling now, whose next poll meets a 409 again
                # The fourth 409 comes of the retry after the third, so the third is handled.
                await tg.wait_for(lambda f: conflicts(f) >= 4, what="two conflicts after it")
            finally:
                for adapter in (first, second):
                    await adapter.stop()
                    await adapter.close()
    lines = another_process_lines(logs)
    assert sorted(e["process"] for e in lines) == ["first", "second"]
    assert all(e["stage"] == "polling" and "terminated by other getUpdates" in e["error"]
               for e in lines)  # fmt: skip


def test_serve_passes_the_webhook_config_to_the_adapter(tmp_path: Path) -> None:
    extra = (
        "adapters:\n  telegram:\n    token: '123:abc'\n    webhook:\n"
        "      url: https://bot.example.org/telegram\n      listen: '127.0.0.1:8600'\n"
        f"      secret_token: {SECRET}\n"
    )
    config = make_config(tmp_path, "http://127.0.0.1:1", extra)
    [adapter] = [a for a in _adapters(config, "lark", lambda: None) if a.name == "telegram"]
    assert isinstance(adapter, TelegramAdapter)
    wanted = Webhook("https://bot.example.org/telegram", "127.0.0.1", 8600, "/telegram", SECRET)
    assert adapter._webhook == wanted  # split from `listen`, the path by default
    assert adapter.notes() == [
        "Telegram: updates come by webhook, https://bot.example.org/telegram"
    ]
    polling = make_config(tmp_path, "http://127.0.0.1:1", "adapters: {telegram: {token: '1:a'}}\n")
    [plain] = _adapters(polling, "lark", lambda: None)
    assert plain.notes() == []

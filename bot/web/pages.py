"""Every page of the console and every change it makes, by path."""

from __future__ import annotations

from collections.abc import Mapping

from bot.web import people, souls, status
from bot.web.server import Handler

ROUTES: Mapping[str, Handler] = {
    "/souls": souls.souls_page,
    "/memory": souls.memory_page,
    "/usage": status.usage_page,
    "/people": people.people_page,
    "/health": status.health_page,
}
ACTIONS: Mapping[str, Handler] = {
    "/souls/reload": souls.reload_action,
    "/souls/rollback": souls.rollback_action,
    "/memory/compile": souls.compile_action,
    "/people/approve": people.approve_action,
    "/people/deny": people.deny_action,
    "/people/revoke": people.revoke_action,
}

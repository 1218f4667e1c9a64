"""Which answers are spoken, and how (issue 28's voice out).

An answer is spoken when its chat's `voice_replies` (the binding's, else
`voice.speech.replies`) is `always`, or `when-spoken-to` and the message it
answers was a voice note (`Inbound.spoken`); and when the soul's `voice:` block
names a provider that `voice.speech` sets up. Never on the terminal, which
plays nothing. `voice.speech.mode` says whether the voice note comes beside
the text (after it) or alone (the text only when speech fails). A failed
speech call is one `voice.speech_failed` line: the person gets the text.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from bot.chat.places import CONSOLE, binding_for
from bot.config.schema import Config
from bot.errors import SpeechError
from bot.model.usage import CallContext
from bot.soul.registry import SoulRegistry
from bot.soul.voice import SoulVoice
from bot.types import Inbound, Route, VoiceNote
from bot.voice.speech import Speech

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Spoken:
    """An answer to speak: in which voice, and whether the voice note is all
    that is sent (`only`)."""

    voice: SoulVoice
    only: bool


class Voicing:
    """Decides which answers are spoken, and speaks them."""

    def __init__(self, config: Config, registry: SoulRegistry, speech: Speech) -> None:
        self._config = config
        self._registry = registry
        self._speech = speech

    def plan(self, route: Route, target: Inbound) -> Spoken | None:
        """How the answer to `target` is spoken, or None when it is not."""
        if target.platform == CONSOLE:
            return None
        binding = binding_for(self._config.bindings, target)
        speech = self._config.voice.speech
        mode = (binding.voice_replies if binding else None) or speech.replies
        if mode == "off" or (mode == "when-spoken-to" and not target.spoken):
            return None
        soul = self._registry.get(route.soul)
        voice = soul.persona.speech() if soul is not None else None
        if voice is None or not self._speech.available(voice):
            return None
        return Spoken(voice, speech.mode == "only")

    async def speak(
        self, spoken: Spoken, route: Route, text: str, mood: str | None = None
    ) -> VoiceNote | None:
        """`text` as a voice note in `spoken`'s voice (its settings for `mood`);
        None, after one log line, when speech fails."""
        ctx = CallContext(route.soul, route.scope, route.session, route.user, "turn")
        try:
            return await self._speech.speak(text, spoken.voice, mood, ctx)
        except SpeechError as exc:
            log.warning("voice.speech_failed", provider=spoken.voice.provider, error=str(exc))
            return None

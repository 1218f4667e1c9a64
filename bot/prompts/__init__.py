"""The prompts and fixed replies soulbot sends, each readable on its own (STYLE §11)."""

from __future__ import annotations

# Replies the user sees when a turn cannot be answered.
APOLOGY = "I can't answer right now, please try again in a moment."
# A request the model's API refuses as it is (a 4xx): trying again would not help.
MODEL_REJECTED = (
    "I can't answer that: my model service refused the request. The admin can see why in the log."
)
# A person past `limits.messages_per_minute` (once a minute; their messages wait).
SLOW_DOWN = (
    "You're writing faster than I can answer: I've kept every message and will answer "
    "them together in a moment."
)

# A model answer with no text, and the end of one cut at max_tokens.
EMPTY_ANSWER = "I have no words for that one, sorry. Could you say it another way?"
ANSWER_CUT = "\n\n[... my answer was cut off here: ask me to go on]"
DAILY_LIMIT = "I've reached my daily limit for today. Let's talk again tomorrow."

# The per-turn line at the head of the newest user message (never cached).
NOW_LINE = "(Now: {now} UTC.)"
# ... when the person's time zone is known (bot/chat/reminders.py): their clock too.
NOW_LINE_LOCAL = "(Now: {now} UTC; {local} where they are, {zone}.)"

# The summary of compacted history, a system block after the soul's own.
SUMMARY_BLOCK = "## Earlier in this conversation\n{summary}"

COMPACT_SYSTEM = (
    "You keep the running summary of a chat between a persona and the people it talks "
    "with. Write a compact summary in the third person: who said what that matters later "
    "(names, facts about people, promises, open questions, the mood). Keep earlier summary "
    "points that still matter. No preamble, at most 250 words."
)
COMPACT_USER = (
    "Earlier summary:\n{summary}\n\nConversation to fold in, one line per message after its "
    "speaker (a line break inside a message is shown as \\n):\n{transcript}\n\nThe new summary:"
)

# The compile, first step: one forced `file_notes` call per batch of new notes
# files each note on the pages it is about (existing ones, or new entities/ and
# concepts/ pages).
FILE_SYSTEM = (
    "You keep a personal markdown wiki for a persona: a page per person, pet, place or thing "
    "that matters (entities/<name>) and per recurring topic (concepts/<topic>), with names in "
    "lower case and hyphens, like entities/ann or concepts/travel-plans. You get the wiki's "
    "pages with their summaries and numbered notes from recent conversations. File every note "
    "with the file_notes tool on the page or pages it is about: an existing page where one "
    "fits, else a new page with a one-line summary. Small talk with nothing worth keeping "
    "goes on concepts/notes."
)
FILE_USER = "The wiki's pages:\n{catalog}\n\nNotes to file, oldest first:\n{notes}"
FILE_NO_PAGES = "(none yet)"
FILE_TOOL_DESCRIPTION = "File each numbered note on the wiki pages it is about."
# The compile, second step: one call per page touched; the answer is the page's new body.
COMPILE_SYSTEM = (
    "You maintain one page of a personal markdown wiki that a persona keeps about the "
    "people it talks with and what they said. You get the page as it is now (people may "
    "have edited it by hand: keep their words unless a new fact plainly replaces them) and "
    "new facts from recent conversations. Integrate the new facts: add what is new, update "
    "what changed (say when), merge duplicates, keep it concise and factual, and link other "
    "pages as [[entities/name]] or [[concepts/topic]] where it helps. Answer with the full "
    "new page body in markdown only: no front matter, no preamble."
)
COMPILE_USER = (
    "Page: {page_id}\n\nThe page now:\n{body}\n\nNew facts, oldest first:\n{facts}\n\n"
    "Keep the page under {cap} tokens (about {chars} characters): condense older detail "
    "rather than drop a fact. The full new page body:"
)
EMPTY_PAGE = "(empty: a new page)"
# A page over `memory.page_max_tokens`: its oldest paragraphs move to a part page.
PART_SUMMARY = "Earlier notes of {page_id}"
PART_LINK = "Earlier notes: {link}"
PARTS_LINE = "earlier notes of {page_id}, in {count} parts"

# The recall block and the scope's memory index in a turn.
RECALL_BLOCK = "Memories that may be relevant (from earlier conversations):\n{lines}"
SCOPE_INDEX_BLOCK = "## Long-Term Memory of this conversation (index)\n{index}"

# Chat command replies about memory.
FORGET_DONE = "Done: I have forgotten everything from this conversation's memory."
FORGET_DONE_GROUP = "Done: I have forgotten everything from this group's memory."
FORGET_GROUP_MEMBER = (
    "In a group, only an admin can erase the group's memory. To erase what I remember "
    "of our private chats, send /forget to me in a private chat."
)
FORGET_ASK_GROUP = (
    "This erases everything I remember from this group: my notes about it and its "
    "history, for everyone here. It cannot be undone. Send /forget confirm to go ahead."
)
FORGET_ASK_MEMBER = (
    "This erases everything I remember of you in this server: what you said in any of its "
    "channels, kept for your own turns. The channels' conversations stay, as everyone here "
    "saw them. It cannot be undone. Send /forget confirm to go ahead."
)
FORGET_DONE_MEMBER = "Done: I have forgotten everything I remembered of you in this server."
FORGET_SHARED = (
    "This chat shares its memory with the soul's wiki, so /forget cannot erase it here. "
    "Ask an admin, or talk to me in a private chat."
)
# /memory: what a person sees and fixes of their own memory (bot/chat/commands.py).
MEMORY_DM_ONLY = (
    "/memory shows and fixes what I remember of you: it works in a private chat with me."
)
MEMORY_SHARED = (
    "This chat shares its memory with the soul's wiki, so /memory has no private memory "
    "to show here."
)
MEMORY_USAGE = (
    "/memory lists what I remember of you; /memory drop PAGE removes one page and what "
    "it was built from; /memory export sends it all as one file."
)
MEMORY_EMPTY = "I keep no pages about you yet."
MEMORY_SERVERS = "What I keep of you in servers and groups (read only in your own turns there):"
MEMORY_SERVER = "- {platform} {server}: {pages} pages, {waiting} messages not folded yet"
MEMORY_MORE_SERVERS = "- and {count} more servers"
MEMORY_SERVERS_FOOT = "/memory server ID lists one, with its own drop, export and forget."
MEMORY_SERVER_HEAD = "In {platform} {server}:"
MEMORY_SERVER_FOOT = (
    "/memory server {server} drop PAGE removes a page and the messages it was built from; "
    "/memory server {server} export sends everything as one file; "
    "/memory server {server} forget erases it all."
)
MEMORY_SERVER_USAGE = (
    "/memory server ID lists what I keep of you in that server or group; add drop PAGE, "
    "export, or forget."
)
MEMORY_BAD_SERVER = "'{server}' cannot be a server or group id."
MEMORY_SERVER_FORGET_ASK = (
    "This erases everything I remember of you in {platform} {server}. It cannot be undone. "
    "Send /memory server {server} forget confirm to go ahead."
)
MEMORY_SERVER_FORGOTTEN = (
    "Done: I have forgotten everything I remembered of you in {platform} {server}."
)
MEMORY_HEAD = "What I keep about you:"
MEMORY_PAGES = "Pages ({count}):"
MEMORY_MORE_PAGES = "- and {count} more (/memory export has them all)"
MEMORY_LOGS = "Daily logs: {count} ({first} to {last})."
MEMORY_NOTES = "Not folded into the pages yet: {count} messages. The latest:"
MEMORY_NO_NOTES = "Every message so far is folded into the pages."
MEMORY_FOOT = (
    "/memory drop PAGE removes a page and the messages it was built from; "
    "/memory export sends everything as one file; /forget erases it all."
)
MEMORY_BAD_ID = "'{page}' cannot be a page: {reason}."
MEMORY_NO_PAGE = "There is no page '{page}' in your memory (/memory lists them)."
MEMORY_NOT_LOG = (
    "'{page}' is a daily log: its lines go when you drop the pages they were folded "
    "into (or /forget erases everything)."
)
MEMORY_DROPPED = (
    "Done: I dropped the page {page} and the {traces} messages it was built from "
    "({lines} log lines went with them). They will not come back."
)
MEMORY_BUSY = "Your memory is being compiled right now: try again in a minute."
MEMORY_EXPORTED = (
    "That file is everything I keep about you: {pages} pages, {logs} daily logs and "
    "{waiting} messages not folded into the pages yet."
)
MEMORY_EXPORT_FAILED = "I could not send the file ({reason}). Please try again later."
MEMORY_TOO_LARGE = (
    "Your memory is {size} MB, too large to send as one file here (the limit is {limit} "
    "MB): ask an admin for a copy."
)
EXPORT_HEAD = (
    "# What {soul} keeps about you\n\nYour private memory ({scope}), exported {when}: the "
    "catalog, each page, the daily logs, then the messages not folded into the pages yet."
)
EXPORT_PENDING = "Not folded into the pages yet"

# The DM gate (bot/chat/access.py).
ALLOWLIST_ONLY = "Sorry, I only talk with people on my allowlist here."
PAIRING_CODE = (
    "Hi! I only talk with people an admin has approved. Your pairing code is {code} "
    "(valid for one hour). Ask an admin to send me: /pair approve {code}"
)

# Chat commands (bot/chat/commands.py).
HELP = (
    "Talk to me in plain words. Commands:\n"
    "/reset starts a new conversation (I keep my long-term memory)\n"
    "/retry writes my last answer again; /undo takes back your last message and my answer "
    "(from the conversation and my memory)\n"
    "/forget erases what I remember from this conversation (asks to confirm first)\n"
    "/memory lists what I remember of you (in a private chat); /memory drop PAGE removes "
    "one page and what it was built from; /memory export sends it all as one file; "
    "/memory server ID does the same for what I keep of you in a server or group\n"
    "/reminders lists the reminders you asked me for; /reminders cancel N cancels one\n"
    "/timezone shows the time zone I read your times in; /timezone ZONE sets it "
    "(e.g. /timezone Europe/Lisbon)\n"
    "/checkins off stops the messages I may write first to ask how something went; "
    "/checkins on allows them again\n"
    "/help shows this."
)
ADMIN_HELP = (
    "Admin commands:\n"
    "/soul reload [name] loads souls again from disk\n"
    "/soul status shows souls, sessions, memory compiles and today's usage\n"
    "/soul compile [name] compiles the memory wikis now\n"
    "/soul usage [days] shows tokens and cost\n"
    "/soul rollback NAME WHEN restores a backup of SOUL.md (YYYY-MM-DD[THHMMSS])\n"
    "/soul epoch NAME starts a new autobiography (core and memory kept)\n"
    "/soul web gives you a sign-in link to the web console (in a DM)\n"
    "/pair approve CODE lets a person talk to me; /pair deny CODE drops a waiting code\n"
    "/pair revoke PLATFORM:ID takes an approval back (e.g. telegram:123)\n"
    "/pair list shows the waiting codes and the approved people"
)
RETRY_NONE = "There is no answer of mine here to write again yet."
UNDO_NONE = "There is no answer of mine here to take back."
TAKE_BACK_OTHER = "That answer was to someone else: only they, or an admin, can take it back."
RETRY_DONE = "Done: my answer above is written anew."
RETRY_FAILED = (
    "I could not write that answer anew (the line above says why); the old one is out of "
    "our conversation. Send /retry to try again."
)
UNDO_DONE = (
    "Taken back: your last message and my answer are out of this conversation and of my memory."
)
RETRY_SLOW_DOWN = "You're asking faster than I can answer: send /retry again in {seconds} seconds."
TAKE_BACK_PAGES_KEPT = (
    "Some of it was already in my notes on this group, which hold what others said too: "
    "those notes stay. An admin can take them out (/undo as an admin, or /forget)."
)
TAKE_BACK_GONE = "This conversation was reset or forgotten meanwhile: nothing to take back."
RESET_DONE = "Started a new conversation. I still remember what my memory holds."
FORGET_ASK = (
    "This erases everything I remember from this conversation: my notes about it and "
    "its history. It cannot be undone. Send /forget confirm to go ahead."
)
ADMIN_ONLY = "Sorry, only an admin can use /{command}."
UNKNOWN_COMMAND = "I don't know the command /{command}."
SOUL_USAGE = (
    "Use: /soul reload [name] | /soul status | /soul compile [name] | /soul usage [days] | "
    "/soul rollback NAME WHEN | /soul epoch NAME | /soul web"
)
WEB_OFF = "The web console is off: set web.enabled in the config and restart."
WEB_DM_ONLY = "/soul web gives a sign-in link only in a private chat with me, never in a group."
WEB_LINK = (
    "Your sign-in link to the web console (it works once, for {minutes:g} minutes; "
    "share it with nobody):\n{link}"
)
RELOAD_ID_ONLY = (
    "/soul reload NAME takes a soul id (letters, digits, '.', '_' or '-', as its folder "
    "in workspaces is named), not a path."
)
PAIR_USAGE = "Use: /pair approve CODE | /pair deny CODE | /pair revoke PLATFORM:ID | /pair list"
PAIR_UNKNOWN = "No pairing code {code} is waiting (it may be wrong, used or expired)."
PAIR_APPROVED = "Approved {name} ({platform} id {user_id}): they can talk to me now."
PAIR_DENIED = (
    "Dropped the code {code} of {name} ({platform} id {user_id}). If they write again, "
    "they get a new code."
)
PAIR_REVOKED = "Revoked the approval of {who}."
PAIR_NOT_APPROVED = "{who} is not approved by pairing."
PAIR_GATED = "Their next private message gets a pairing code."
PAIR_STILL_ADMITTED = "The config still lets them in (admins, allowlist or dm_policy open)."
PAIR_NONE = "No pairing code is waiting, and nobody is approved by pairing."
PAIR_WELCOME = "An admin approved you: we can talk now. Say hello!"
COMPILE_STARTED = "Compiling the memory of {souls}; I'll report here when it is done."
COMPILE_DONE = "Compile done: {wikis} wikis, {traces} new traces folded into {pages} pages."
COMPILE_FAILED = (
    "The compile failed for {count} wiki(s); their traces wait for the next compile:\n"
    "{failures}\n{done}"
)
# Why a wiki did not compile, by the error's kind (the log line has the details).
COMPILE_UNAVAILABLE = "the model service did not answer"
COMPILE_REJECTED = "the model service refused the request (the log has why)"
COMPILE_BUDGET = "today's token budget is used up"
COMPILE_FILES = "a wiki file could not be read or written ({why}; the log has which)"
COMPILE_OTHER = "see the wiki.compile_failed log line"
COMPILE_STOPPED = "The compile stopped: {error}: {reason}. The traces wait for the next compile."

# A video, sticker or file instead of text (after the DM gate).
TEXT_ONLY = "I can only read text and images, sorry: please tell me in words."
# A voice note where no transcription is configured (`voice.transcription.base_url`).
VOICE_NOT_CONFIGURED = (
    "I can only read text and images here, sorry: please tell me in words. (Voice notes are "
    "heard once the bot's admin sets voice.transcription.base_url.)"
)
# Voice notes (bot/chat/voice.py): what the model, the history and the traces are given,
# "[voice note, 12 s] the transcript"; a note not transcribed keeps its placeholder.
VOICE_HEARD = "[{kind}, {seconds} s] {transcript}"
VOICE_PLACEHOLDER = "[{kind}, {seconds} s]"
VOICE_NOT_HEARD = "[{kind}, {seconds} s: not transcribed]"
# Why a voice note was not heard, then what became of it (one line to the person).
VOICE_TOO_LONG = "your {kind} is too long for me ({seconds} s; I take up to {limit} s)"
VOICE_TOO_LARGE = "your {kind} is too large for me ({size}; I take up to {limit})"
VOICE_UNREADABLE = "your {kind} could not be read as audio: {reason}"
VOICE_FAILED = "I could not transcribe your {kind}: {reason}"
VOICE_SILENT = "I heard no words in your {kind}"
VOICE_BUDGET = "I've reached my daily limit for today, so I did not listen to your {kind}"
VOICE_REFUSED = "Not heard: {reasons}. It is not kept: please send it again, or type it."
# Images the core could not give the model (the adapters word their own refusals).
IMAGE_TOO_LARGE = "the {kind} is too large for me to look at ({size}; I take up to {limit})"
IMAGE_FAILED = "I could not download the {kind} ({reason})"
IMAGE_TOO_MANY = "I look at up to {limit} images a message (this one had {count})"
IMAGE_NOT_AN_IMAGE = "the {kind} could not be read as an image (it came as {mime})"
FILE_NOT_AN_IMAGE = '"{name}" is not an image I can read (it came as {mime})'
IMAGES_LEFT_OUT = (
    "I look at up to {limit} images at a time, the newest: {count} sent before them were left out"
)
IMAGES_REFUSED = "Not everything you sent reached me: {reasons}."

# A group chat's messages not addressed to the bot, given to the next turn that is
# (per-turn, never cached), one "name: text" line each, oldest first.
CONTEXT_BLOCK = (
    "What was said in this chat since you last spoke, not addressed to you (oldest first):\n{lines}"
)
# A message that replies to another: the quoted message, before the message's own text.
QUOTED = '(replying to {name}: "{text}")'
# A reply to the bot's own message. Its head is not QUOTED's: a display name fills only
# QUOTED's `{name}`, after "(replying to ", so no name (not even "you") reads as this.
QUOTED_BOT = '(in reply to your own message: "{text}")'
# The name another bot's message is shown under (history, context, memory), so the
# model knows it talks with a bot.
BOT_AUTHOR = "{name} (a bot)"
# The per-turn note of a message that carries images, and what the history keeps of it.
IMAGES_NOTE = (
    "(The newest message carries {count} image(s). Begin your answer with one line "
    '"[seen: what the image(s) show, in at most 20 words]"; that line is kept as your '
    "note and is not shown. Then answer as usual.)"
)
IMAGE_PLACEHOLDER = "[{kind}{caption}]"
IMAGE_SEEN = "[{kind}{caption}; it showed: {seen}]"
IMAGE_NOT_SEEN = "[{kind}{caption}; not seen: refused]"

# The end of a message cut at the router's limit.
MESSAGE_CUT = " [... cut here: the message was {chars} characters long]"

# The heartbeat (bot/chat/reflect.py): one forced save_soul call after a conversation.
HEARTBEAT_SYSTEM = (
    "You are {name}, looking back on a conversation that just ended, to keep your short "
    "autobiography. Call save_soul once. reflection: one sentence in the first person, at "
    "most 200 characters, that names a concrete fact or moment from this conversation and "
    "what you make of it; no empty phrases such as 'I understand the user better now'. "
    "memory_updates: objective facts worth keeping (about the people or the world, not "
    "your feelings), each one line with an importance from 0 to 1 (0.2: passing mood; "
    "0.6: a stable preference; 0.9: something central); [] when there is none. "
    "rule_updates: a new behaviour boundary only when the conversation clearly showed "
    "one, one line each; usually []. Plain text only: no headings, no HTML, no newlines."
)
HEARTBEAT_USER = (
    "Your SOUL.md as it is now:\n<soul>\n{soul}\n</soul>\n\n"
    "The conversation, oldest first, one line per message after its speaker (a line break "
    "inside a message is shown as \\n):\n<conversation>\n{transcript}\n</conversation>"
)
FOLD_SYSTEM = (
    "You keep the autobiography of a persona. Fold the entries you are given into one "
    "overview sentence, in the first person, at most 300 characters, that keeps the "
    "concrete facts and the turning points. Answer with the sentence only: one line, no "
    "heading, no list marker, no HTML."
)
FOLD_USER = "Entries, newest first:\n{entries}\n\nThe overview:"
END_CONVERSATION = (
    "Call this when the person says goodbye or otherwise clearly ends the conversation "
    "for now (then answer them as usual)."
)
# Moods (bot/soul/prompt.py `mood_block`, bot/chat/moods.py): the first of a
# conversation's own system blocks, right after the soul's hard limits.
MOOD_HEADING = "## Mood"
MOOD_NOW = (
    "Your mood in this conversation: {mood}. Let it colour your tone and your choice of "
    "words; it never bends the hard limits above."
)
MOOD_NONE = "You are in no particular mood in this conversation."
MOOD_MAY_CHANGE = (
    "You may move to another of your moods ({moods}) with the set_mood tool when the "
    "conversation gives you a reason; it holds in this conversation until you change it."
)
SET_MOOD = (
    "Change your mood in this conversation to one of your moods: {moods}. It stays until "
    "you change it again or the conversation is reset; then answer as usual."
)
# The reminder tools (bot/chat/reminders.py): the same bytes for every conversation.
SET_REMINDER = (
    "Set a reminder when the person asks you to remind them of something later. `when` is "
    "either a local date and time in the person's time zone, ISO 8601 without an offset "
    "(2026-05-02T09:00), or a time from now as an ISO 8601 duration (PT30M, PT2H, P1D). "
    "`text` says what to remind them of, in their words. The reminder comes back in this "
    "conversation at that time. The answer says the time it was read as, the time now and "
    "the zone, both in that zone: tell the person the time and the zone, and if the zone is "
    "UTC because theirs is not known, say so and ask where they are."
)
SET_TIMEZONE = (
    "Set the person's time zone when they tell you where they are or which zone they are in, "
    "as an IANA zone name (Europe/Lisbon, America/New_York, Asia/Tokyo). Their reminders' "
    "times are read in it from then on."
)
# The one call that says a reminder when it comes due (bot/chat/reminder_delivery.py).
REMINDER_DUE = (
    "[A reminder you set for {name} is due now: {text!r} (asked for {when}).{late} Say it to "
    "them now, in your own voice, in a line or two, as a message of yours in this "
    "conversation. Do not mention this note.]"
)
REMINDER_LATE = " It is {delay} late because you were away: say so briefly."
# Check-ins (bot/chat/check_ins.py): the heartbeat's planning call, and the delivery's note.
PLAN_CHECK_IN_SYSTEM = (
    "You decide whether a persona should follow up, later and unasked, on something a person "
    "said in a private conversation that just ended."
)
PLAN_CHECK_IN = (
    "Plan at most one follow-up message. Set follow_up true only for something the person "
    "said that has a moment worth asking about afterwards (an exam, an interview, a trip, a "
    "hard day, a doctor's visit); then `about` says what, in a few words, and `when` is a "
    "local date and time in the person's zone, ISO 8601 without an offset "
    "(2026-05-02T18:00), soon after that moment and within two weeks. Otherwise follow_up is "
    "false."
)
PLAN_CHECK_IN_USER = "It is {now} for them now.\n\nThe conversation:\n{transcript}"
CHECK_IN_DUE = (
    "[You planned to check in with {name} about {about!r} now. Write to them first, in your "
    "own voice, in a line or two: ask how it went, warmly, without pressing. Do not mention "
    "this note.]"
)
CHECKINS_ON = "Check-ins are on: I may write to you first to ask how something went."
CHECKINS_OFF = "Check-ins are off: I won't write to you first (reminders you ask for still come)."
CHECKINS_PLANNED = "One is planned for {when}, about: {about}"
CHECKINS_NOT_HERE = "They come in DMs only; /checkins in our DM shows the one planned."
CHECKINS_USAGE = "Use: /checkins | /checkins on | /checkins off"
# Sent as it is when the model cannot say the reminder (down, over budget).
REMINDER_FALLBACK = "Reminder: {text}"
REMINDER_FALLBACK_LATE = "Reminder ({delay} late): {text}"
REMINDERS_NONE = 'You have no reminders waiting. Ask me in plain words: "remind me ...".'
REMINDERS_HEAD = "Your reminders (times in {zone}):"
REMINDERS_FOOT = "/reminders cancel N cancels one."
REMINDERS_ADMIN = "On this store: {total} reminders waiting, set by {people} people."
REMINDERS_USAGE = "Use: /reminders | /reminders cancel N"
REMINDER_CANCELLED = "Cancelled reminder {number}: {text}"
REMINDER_NOT_FOUND = "There is no reminder {number}; /reminders lists yours."
TIMEZONE_SHOWN = "I read your times in {zone}."
TIMEZONE_UNKNOWN = (
    "I don't know your time zone, so I read your times in UTC. Set it with /timezone ZONE "
    "(e.g. /timezone Europe/Lisbon)."
)
TIMEZONE_SET = "From now on I read your times in {zone}."
TIMEZONE_BAD = "{zone} is not a time zone I know; use an IANA name such as Europe/Lisbon."
# The heartbeat's default `heartbeat.empty_phrases`: a reflection made of one is rejected.
DEFAULT_EMPTY_PHRASES = (
    "I understand the user better now",
    "I learned a lot from this conversation",
    "I grew as a person",
    "This was a meaningful conversation",
    "I feel more connected to the user",
    "I became more empathetic",
)
SELF_PAGE_SUMMARY = "What I noticed about myself in this conversation, and facts to keep"

# `soulbot check --online`: the 1-token call that asks who answers, and the forced
# tool call that asks whether tools work there (bot/model/probe.py).
PROBE_USER = "Say OK."
PROBE_TOOL_NAME = "report_ready"
PROBE_TOOL_DESCRIPTION = "Report that you are ready."
PROBE_TOOL_USER = "Call report_ready with ready set to true."

# Ambient mode's gate (bot/chat/ambient.py): one forced `speak` call on a cheap model,
# asked only when the scorer's figure is over `groups.ambient.threshold`.
AMBIENT_SYSTEM = (
    "You watch a group chat for {name}{role}. Decide whether {name} should say something "
    "now, after the newest message. Speak when {name} is addressed without a mention (by name, "
    "a question to them, a follow-up to what they just said), or when a question nobody has "
    "answered is one {name} can help with, or the talk is squarely on what {name} is for and "
    "they have something to add. Stay silent when people are talking to each other, for small "
    "talk, thanks, jokes, or a question meant for someone else. When unsure, stay silent. "
    "Answer only by calling the tool speak; give a reason of a few words, quoting no one."
)
AMBIENT_USER = "The chat, oldest first; the last line is the newest message:\n{lines}"
# How the persona's own lines show in the gate's transcript.
AMBIENT_OWN = "{name} (you)"
AMBIENT_TOOL_DESCRIPTION = "Say whether to speak now (true) or stay silent (false), and why."

# The usage report (`soulbot usage`, `/soul usage`) of days without a model call or voice row.
USAGE_NONE = "No usage recorded in the last {days} day(s) ({span})."

# The usage chart (bot/model/usage_chart.py): its title, its panels' labels, and what a
# span without usage shows instead.
CHART_TITLE = "Usage by {by}, {span}"
CHART_TOKENS = "tokens"
CHART_COST = "cost (USD)"
CHART_EMPTY = "No usage yet\n({span})"

# `/soul usage` in a phone's width (bot/model/usage_compact.py): its first line, and the
# line under it when some calls' model server reported no cache figures.
USAGE_COMPACT_HEAD = "Usage {span}"
USAGE_COMPACT_UNKNOWN = "hit {unknown}: no cache figures; {mark}: some"

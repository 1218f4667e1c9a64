"""The markdown memory wiki over one `memory/` folder.

The shared wiki is `<workspace>/memory/`; a private one under data_dir has the
same layout:

    index.md           the catalog: `# Memory Index`, the migrated MEMORY.md
                       block when there is one, then a section per kind of page
                       (Entities, Concepts, Logs), one `- [[id]]: summary` line
                       each, and one line for all the logs
    entities/, ...     pages: YAML front matter (id, type, summary, updated, and
                       any field a person added) and a markdown body; a page
                       over its cap has parts `<id>/part-<n>`
    log/YYYY-MM-DD.md  append-only daily logs, created with a `# Log <day>`
                       heading and no front matter; their path makes a valid id,
                       so they are pages (type `log`) listed under Logs
    .meta/index.json   page hashes, backlinks, the compile watermark, the
                       traces a conflict left waiting (`pending`)

Links. Pages, logs and .meta are read and written following a link only
while it stays inside the wiki's bounds: the soul folder for the shared wiki
(a wiki may link in notes kept beside it), the wiki's own folder for a private
one (never another person's wiki, nor anything of the soul's). A link that
leads out, at any name on the path (the file, a folder on the way, `.meta`,
the shared `memory/` itself), is neither read nor written through: it is
logged as `wiki.link_refused`; a page behind it reads as absent and a write is
refused (WikiPathRefused). The seed's store follows every link; a wiki's pages
reach whoever talks to the soul, so here no link may bring a file in from
outside or send a write out. index.md is read through no link at all and
written whole, through a new file and a rename.

Modes. A private wiki's folders are made 0700 and its files 0600, whatever
the umask; the shared wiki is a person's own workspace and gets the umask's.
Everything is synchronous: callers run it in a worker thread.

    InvalidWikiPageIdError  an id that breaks the page-id rule (bot.errors)
    PageFormatError         a page whose front matter or encoding cannot be read
    WikiPathRefused         the file system refuses a page's path, or a link on
                            it leads out (an OSError)
    OSError                 any other failed read or write, a full disk among them
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import structlog

from bot import prompts
from bot.errors import PageFormatError, WikiPathRefused
from bot.memory import pagesize
from bot.memory.page import Page, parse_page, render_page
from bot.memory.pageid import (
    CATALOG_ID,
    MAX_ID_CHARS,
    default_summary,
    is_wiki_page_id,
    page_path,
    page_type,
)
from bot.soul.files import INDEX_HEADING, MIGRATED_END, MIGRATED_START
from bot.storage import files
from bot.storage.files import decode_text

log = structlog.get_logger(__name__)

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_SECTIONS = (("entity", "## Entities"), ("concept", "## Concepts"), ("log", "## Logs"))
_IN_PLACE = frozenset({errno.EACCES, errno.EPERM, errno.EBUSY})
_META_ID = ".meta/index.json"  # names .meta in a WikiPathRefused


def _next_text(lines: list[str], start: int) -> int:
    return next((i for i in range(start, len(lines)) if lines[i].strip()), len(lines))


def migrated_block(index: str) -> str | None:
    """The migrated MEMORY.md block of an index.md text, start to end marker;
    None when there is none. The block opens with the start marker as the first
    line under the heading (or the file's first line); without an end marker it
    runs to the end of the file and gets one here. A start marker anywhere else
    opens nothing."""
    lines = index.split("\n")
    at = _next_text(lines, 0)
    if at < len(lines) and lines[at].strip() == INDEX_HEADING:
        at = _next_text(lines, at + 1)
    if at == len(lines) or lines[at].strip() != MIGRATED_START:
        return None
    for end in range(at + 1, len(lines)):
        if lines[end].strip() == MIGRATED_END:
            return "\n".join(lines[at : end + 1])
    return "\n".join(lines[at:]).rstrip() + "\n" + MIGRATED_END


def render_catalog(summaries: dict[str, str], block: str | None) -> str:
    """index.md's text: the heading, the migrated block, then one section per
    kind of page that has any, a `- [[id]]: summary` line per page by id, but
    one line for all the daily logs (the newest, how many, since when) and one
    for all the parts of a page (its newest), so the catalog, and the prompt it
    is part of, grows with neither the days nor a page's size. A
    summary is put on one line; an empty one is replaced by the default."""
    parts = [INDEX_HEADING] + ([block] if block else [])
    counts: dict[str, int] = {}  # a page with parts -> its newest part's number
    for page_id in summaries:
        parent, _, _ = page_id.rpartition("/")
        number = pagesize.part_number(parent, page_id) if parent in summaries else None
        if number:
            counts[parent] = max(counts.get(parent, 0), number)
    for kind, heading in _SECTIONS:
        ids = sorted(page_id for page_id in summaries if page_type(page_id) == kind)
        lines = []
        for page_id in ids:
            parent, _, _ = page_id.rpartition("/")
            if parent in counts and pagesize.part_number(parent, page_id):
                continue  # a page's parts are one line, after it
            summary = " ".join(summaries[page_id].split()) or default_summary(page_id)
            lines.append(f"- [[{page_id}]]: {summary}")
            if page_id in counts:
                newest = pagesize.part_id(page_id, counts[page_id])
                more = prompts.PARTS_LINE.format(page_id=page_id, count=counts[page_id])
                lines.append(f"- [[{newest}]]: {more}")
        if kind == "log" and len(ids) > 1:  # one line, however many days there are
            days = sorted(ids, key=lambda page_id: page_id.rsplit("/", 1)[-1])
            first, newest = days[0].rsplit("/", 1)[-1], days[-1]
            lines = [f"- [[{newest}]]: the newest of {len(ids)} daily logs (since {first})"]
        if lines:
            parts.append(heading + "\n\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"


@contextmanager
def _refusals(page_id: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if WikiPathRefused.refuses(exc) and not isinstance(exc, WikiPathRefused):
            raise WikiPathRefused(page_id, exc) from exc
        raise


def _decode(data: bytes, page_id: str) -> str:
    try:
        return decode_text(data)
    except UnicodeDecodeError as exc:
        raise PageFormatError(
            page_id, f"not valid UTF-8 (bad byte at offset {exc.start})"
        ) from None


def _catalog_source(path: Path) -> str | None:
    """index.md's text for a catalog write, read through no link: None when it
    is missing or a link (which is replaced, not read). Raises OSError when it
    is anything else that is not a regular file, or cannot be read or decoded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and stat.S_ISLNK(os.lstat(path).st_mode):
            return None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise OSError(errno.EINVAL, f"it is {kind}; move it away", str(path))
        data = files.read_all(fd)
    finally:
        os.close(fd)
    try:
        return decode_text(data)
    except UnicodeDecodeError as exc:
        raise OSError(errno.EILSEQ, f"not UTF-8 (byte {exc.start})", str(path)) from None


def _open_log(path: Path, heading: str, mode: int | None) -> tuple[int, str]:
    """A descriptor appending to the log file at `path` (through no link at
    `path`), and what to write first: `heading` for a new file (made with
    exactly `mode`, or 0o644 less the umask when None), a line end for a file
    that lacks its last one. Raises OSError when something else is in its place."""
    try:
        fd = os.open(path, files.CREATE_FLAGS | os.O_APPEND, 0o644 if mode is None else mode)
    except FileExistsError:
        pass
    else:
        if mode is not None:
            os.fchmod(fd, mode)
        return fd, heading
    flags = os.O_RDWR | os.O_APPEND | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file; move it away", str(path))
    last = os.pread(fd, 1, info.st_size - 1) if info.st_size else b"\n"
    return fd, "" if last == b"\n" else "\n"


class Wiki:
    """The pages, catalog, logs and .meta of the wiki folder `root`: a private
    wiki, or with `shared` the soul's own `<soul folder>/memory/`, whose links
    may lead anywhere in the soul folder (see the module's docstring)."""

    def __init__(self, root: Path, *, shared: bool = False) -> None:
        self.root = root
        self._meta = root / ".meta" / "index.json"
        self._bound = root.parent if shared else root
        self._where = "the soul folder" if shared else "its wiki folder"
        self._folder_mode = None if shared else files.PRIVATE_FOLDER
        self._file_mode = None if shared else files.PRIVATE_FILE

    def _real(self, path: Path) -> Path | None:
        """`path` with its links resolved, when each stays within the wiki's
        bounds; None, with a `wiki.link_refused` warning, when one leads out."""
        out = files.link_out(self._bound, path)
        if out is None:
            return Path(os.path.realpath(path))
        self._refused(*out)
        return None

    def _refused(self, link: Path, target: str) -> None:
        log.warning("wiki.link_refused", path=str(link), target=target, allowed=str(self._bound))

    def _checked(self, path: Path, page_id: str) -> Path:
        """`path` resolved (see `_real`). Raises WikiPathRefused, naming
        `page_id`, when a link on it leads out."""
        real = self._real(path)
        if real is None:
            refusal = OSError(errno.EXDEV, f"a link on its path leads out of {self._where}")
            raise WikiPathRefused(page_id, refusal)
        return real

    def _entries(self, dots: bool) -> Iterator[tuple[str, os.DirEntry[str], str | None]]:
        """(name under the root, entry, None) for everything under the root the
        wiki can reach, dot-names only when `dots`: every folder, and each link
        to a folder that stays within bounds, is walked once. A link that leads
        out comes as (name, entry, where it leads) and is not walked."""
        top = os.path.realpath(self._bound)
        seen: set[tuple[int, int]] = set()

        def walk(folder: Path, prefix: str) -> Iterator[tuple[str, os.DirEntry[str], str | None]]:
            try:
                info = folder.stat()
                with os.scandir(folder) as scan:
                    entries = [entry for entry in scan if dots or not entry.name.startswith(".")]
            except (FileNotFoundError, NotADirectoryError):
                return
            if (info.st_dev, info.st_ino) in seen:
                return
            seen.add((info.st_dev, info.st_ino))
            for entry in entries:
                name = prefix + entry.name
                target = os.path.realpath(entry.path) if entry.is_symlink() else None
                if target is not None and not files.within(target, top):
                    yield name, entry, target
                    continue
                yield name, entry, None
                if entry.is_dir() and len(name) < MAX_ID_CHARS:
                    yield from walk(Path(entry.path), name + "/")

        if self._real(self.root) is not None:
            yield from walk(self.root, "")

    def _page_files(self) -> list[tuple[str, Path]]:
        """(id, path) of each regular `.md` file whose path makes a valid id, by
        id; dot-folders are skipped, and so is a link that leads out (with a
        `wiki.link_refused` warning)."""
        found: list[tuple[str, Path]] = []
        for name, entry, target in self._entries(dots=False):
            if target is not None:
                self._refused(Path(entry.path), target)
            elif name.endswith(".md") and is_wiki_page_id(name[:-3]) and entry.is_file():
                found.append((name[:-3], Path(entry.path)))
        return sorted(found)

    def links_out(self) -> list[tuple[Path, str]]:
        """(link, where it leads) of every link under the root, `.meta` and the
        other dot-folders included, that leads out of the wiki's bounds, by
        path; the root itself when it is one. Logs nothing."""
        out = files.link_out(self._bound, self.root)
        if out is not None:
            return [out]
        return sorted((Path(e.path), target) for _, e, target in self._entries(True) if target)

    def _scan(self) -> Iterator[tuple[str, bytes, Page | None]]:
        """(id, file bytes, page) for every page file; the page is None, with a
        `wiki.page_unreadable` warning, when it cannot be parsed."""
        for page_id, path in self._page_files():
            real = self._real(path)
            data = None if real is None else files.read_regular(real)
            if data is None:
                continue
            try:
                page: Page | None = parse_page(_decode(data, page_id), page_id)
            except PageFormatError as exc:
                log.warning(
                    "wiki.page_unreadable", root=str(self.root), page=page_id, reason=exc.reason
                )
                page = None
            yield page_id, data, page

    def read_page(self, page_id: str) -> Page | None:
        """Page `page_id`, following links on its path that stay within bounds;
        None when no regular file is there or a link on the way leads out (with
        a `wiki.link_refused` warning). Raises InvalidWikiPageIdError,
        PageFormatError, OSError."""
        real = self._real(page_path(self.root, page_id))
        data = None if real is None else files.read_regular(real)
        return None if data is None else parse_page(_decode(data, page_id), page_id)

    def write_page(self, page: Page) -> None:
        """Write `page` whole through a new file and a rename in its folder,
        making the folders it needs; a link at its path that stays within
        bounds is followed, so the file it points to is rewritten. Raises
        InvalidWikiPageIdError, WikiPathRefused when a link on the path leads
        out (nothing is written) or the file system refuses the path, and
        OSError for any other failure."""
        real = self._checked(page_path(self.root, page.id), page.id)
        with _refusals(page.id):
            files.make_folders(real.parent, self._folder_mode)
            files.replace_file(real, render_page(page).encode("utf-8"), self._file_mode)

    def page_ids(self) -> list[str]:
        """The id of every page file (as `list_pages` finds them, parsed or not), by id."""
        return [page_id for page_id, _ in self._page_files()]

    def list_pages(self) -> list[Page]:
        """Every page by id: each regular `.md` file whose path makes a valid id
        (not index.md, nothing under a dot-folder) and that parses."""
        return [page for _, _, page in self._scan() if page is not None]

    def write_catalog(self) -> str:
        """Rewrite index.md as the catalog of every page; return the text written.

        The migrated MEMORY.md block stays above the catalog (with its end
        marker, added when missing). index.md is read through no link and
        written through a new file and a rename, which replaces a link there and
        leaves its target alone; where the new file or the rename is refused
        (EACCES, EPERM, EBUSY) it is written in place. A page that does not
        parse is listed with its default summary. Raises WikiPathRefused when
        the wiki folder itself leads out of bounds, and OSError, writing
        nothing, when index.md is neither a regular file nor a link, or cannot
        be read or decoded.
        """
        path = self._checked(self.root, CATALOG_ID) / "index.md"
        current = _catalog_source(path)
        summaries = {page_id: page.summary if page else "" for page_id, _, page in self._scan()}
        text = render_catalog(summaries, None if current is None else migrated_block(current))
        data = text.encode("utf-8")
        files.make_folders(path.parent, self._folder_mode)
        try:
            files.replace_file(path, data, self._file_mode)
        except OSError as exc:
            if exc.errno not in _IN_PLACE:
                raise
            log.warning("wiki.catalog_in_place", path=str(path), reason=exc.strerror)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(path, flags, self._file_mode or 0o644)
            try:
                files.write_all(fd, data)
            finally:
                os.close(fd)
        return text

    def catalog_text(self) -> str | None:
        """index.md for the system prompt, read as the soul loader reads it
        (through no link at index.md, never waiting), without the migrated end
        marker. None when it is missing, a link or not a regular file (with a
        `wiki.warning`), or when the wiki folder itself leads out of bounds.
        Raises SoulLoadError when it cannot be read or decoded."""
        warnings: list[str] = []
        root = self._real(self.root)
        if root is None:
            return None
        try:
            dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            text = files.read_text(dir_fd, "index.md", self.root / "index.md", warnings)
        finally:
            os.close(dir_fd)
        for warning in warnings:
            log.warning("wiki.warning", root=str(self.root), warning=warning)
        if text is None:
            return None
        return "\n".join(line for line in text.split("\n") if line.strip() != MIGRATED_END)

    def read_meta(self) -> dict[str, Any]:
        """.meta/index.json as a dict; {} when it is missing. Raises ValueError
        when it is not a JSON object, WikiPathRefused when a link on its path
        leads out of bounds (it is not read), OSError when it cannot be read."""
        data = files.read_regular(self._checked(self._meta, _META_ID))
        if data is None:
            return {}
        try:
            meta = json.loads(decode_text(data))
        except ValueError as exc:
            raise ValueError(f"{self._meta}: not valid JSON: {exc}") from None
        if not isinstance(meta, dict):
            raise ValueError(f"{self._meta}: expected a JSON object")
        return meta

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Write .meta/index.json whole (new file + rename), making .meta/.
        Raises TypeError for a value JSON cannot hold, WikiPathRefused when a
        link on its path leads out of bounds (nothing is written), OSError."""
        text = json.dumps(meta, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        real = self._checked(self._meta, _META_ID)
        files.make_folders(real.parent, self._folder_mode)
        files.replace_file(real, text.encode("utf-8"), self._file_mode)

    def update_meta(self, watermark: int, pending: dict[str, list[int]] | None = None) -> None:
        """Store `watermark` and `compiled_at` (now, UTC) with the hashes (sha256
        of each page file, by id) and backlinks ({target: [ids linking to it]},
        no self-links) recomputed from the pages, and, when given, the traces
        still `pending` by page (see `pending`); other keys in .meta are kept.
        Raises ValueError for a negative watermark or a broken .meta, OSError."""
        if watermark < 0:
            raise ValueError(f"a watermark is a whole number from 0, not {watermark!r}")
        hashes: dict[str, str] = {}
        backlinks: dict[str, set[str]] = {}
        for page_id, data, page in self._scan():
            hashes[page_id] = hashlib.sha256(data).hexdigest()
            for target in page.links if page else ():
                if target != page_id:
                    backlinks.setdefault(target, set()).add(page_id)
        meta = self.read_meta()
        meta["hashes"] = hashes
        meta["backlinks"] = {target: sorted(ids) for target, ids in sorted(backlinks.items())}
        meta["watermark"] = watermark
        meta["compiled_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        if pending is not None:
            meta["pending"] = {page: ids for page, ids in sorted(pending.items()) if ids}
            if not meta["pending"]:
                del meta["pending"]
        self.write_meta(meta)

    def pending(self) -> dict[str, list[int]]:
        """The traces a compile could not fold, by the page they wait for
        (`pending` in .meta; {} when none): the next compile takes them up.
        Raises ValueError when .meta holds something else there."""
        value = self.read_meta().get("pending", {})
        if not isinstance(value, dict) or not all(
            isinstance(ids, list) and all(type(i) is int and i > 0 for i in ids)
            for ids in value.values()
        ):
            raise ValueError(f"{self._meta}: 'pending' is not a map of pages to trace ids")
        return {str(page): list(ids) for page, ids in value.items()}

    def remove_stale_temps(self, older_than_s: float = 3600.0) -> int:
        """Remove the temporary files of writes a killed process left behind
        (older than `older_than_s`, so a write in flight elsewhere is spared).
        Returns how many went; none when the wiki folder itself leads out of
        bounds. Linked folders are not searched."""
        removed = 0
        cutoff = time.time() - older_than_s
        root = self._real(self.root)
        for temp in root.rglob(".wiki-*.tmp") if root else ():
            with suppress(OSError):
                if temp.is_file() and not temp.is_symlink() and temp.stat().st_mtime < cutoff:
                    temp.unlink()
                    removed += 1
        return removed

    def watermark(self) -> int:
        """The compile watermark; 0 when none is stored. Raises ValueError when
        .meta holds something else there."""
        return self._mark("watermark")

    def logged_through(self) -> int:
        """The last trace id whose line is in the daily logs (`logged` in .meta;
        0 when none). A compile killed after its log lines but before its
        watermark does not log them twice. Raises ValueError like `watermark`."""
        return self._mark("logged")

    def mark_logged(self, trace_id: int) -> None:
        """Record that the logs hold every trace up to `trace_id`. Raises OSError."""
        meta = self.read_meta()
        meta["logged"] = trace_id
        self.write_meta(meta)

    def _mark(self, key: str) -> int:
        value = self.read_meta().get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{self._meta}: the {key} mark is not a whole number: {value!r}")
        return value

    def append_log(self, day: str, lines: list[str]) -> None:
        """Append `lines` to `log/<day>.md` (day `YYYY-MM-DD`), one line each
        (a line break inside one becomes a space), creating the file with a
        `# Log <day>` heading; nothing already there is rewritten. Raises
        ValueError for a bad day, WikiPathRefused when a link on the path leads
        out of bounds (nothing is written) or the file system refuses the path,
        and OSError for any other failure."""
        if not _DAY.fullmatch(day):
            raise ValueError(f"a log day is YYYY-MM-DD, not {day!r}")
        date.fromisoformat(day)
        if not lines:
            return
        page_id = f"log/{day}"
        real = self._checked(page_path(self.root, page_id), page_id)
        text = "".join(" ".join(line.splitlines()) + "\n" for line in lines)
        with _refusals(page_id):
            files.make_folders(real.parent, self._folder_mode)
            fd, head = _open_log(real, f"# Log {day}\n\n", self._file_mode)
            try:
                files.write_all(fd, (head + text).encode("utf-8"))
            finally:
                os.close(fd)

    def remove_page(self, page_id: str) -> bool:
        """Remove the file of page `page_id` (a link there that stays within
        bounds: the link and the file it points to); returns whether there was
        one. The catalog is not rewritten here. Raises InvalidWikiPageIdError,
        WikiPathRefused when a link on the path leads out (nothing is removed),
        and OSError for any other failure (a folder where the file should be)."""
        path = page_path(self.root, page_id)
        real = self._checked(path, page_id)
        with _refusals(page_id):
            try:
                real.unlink()
            except FileNotFoundError:
                return False
            if path.is_symlink():
                path.unlink()
        return True

    def scrub_log(self, day: str, lines: set[str]) -> int:
        """Take every line equal to one of `lines` (as `append_log` wrote it)
        out of `log/<day>.md`, rewritten whole through a new file and a rename;
        a log left with no line but its heading is removed. Returns how many
        lines went (0 when there is no such log). Raises ValueError for a bad
        day, WikiPathRefused when a link on the path leads out, PageFormatError
        when the log is not UTF-8, OSError."""
        if not _DAY.fullmatch(day):
            raise ValueError(f"a log day is YYYY-MM-DD, not {day!r}")
        page_id = f"log/{day}"
        real = self._checked(page_path(self.root, page_id), page_id)
        data = files.read_regular(real)
        if data is None:
            return 0
        old = _decode(data, page_id).split("\n")
        kept = [line for line in old if line not in lines]
        if len(kept) == len(old):
            return 0
        with _refusals(page_id):
            if all(not line.strip() or line == f"# Log {day}" for line in kept):
                real.unlink()
            else:
                files.replace_file(real, "\n".join(kept).encode("utf-8"), self._file_mode)
        return len(old) - len(kept)

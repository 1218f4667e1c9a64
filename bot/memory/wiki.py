"""The markdown memory wiki over one `memory/` folder.

The shared wiki is `<workspace>/memory/`; a private one under data_dir has the
same layout, and this module does not care which it is:

    index.md           the catalog: `# Memory Index`, the migrated MEMORY.md
                       block when there is one, then a section per kind of page
                       (Entities, Concepts, Logs), one `- [[id]]: summary` line each
    entities/, ...     pages: YAML front matter (id, type, summary, updated,
                       sources, and any field a person added) and a markdown body
    log/YYYY-MM-DD.md  append-only daily logs, created with a `# Log <day>`
                       heading and no front matter; their path makes a valid id,
                       so they are pages (type `log`) listed under Logs
    .meta/index.json   page hashes, backlinks, the compile watermark

Pages, logs and .meta are read and written following links, as the seed's
store does; index.md is read through no link and written whole, through a new
file and a rename. Everything is synchronous: callers run it in a worker thread.

    InvalidWikiPageIdError  an id that breaks the page-id rule (bot.errors)
    PageFormatError         a page whose front matter or encoding cannot be read
    WikiPathRefused         the file system refuses a page's path (an OSError)
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

from bot.errors import PageFormatError, WikiPathRefused
from bot.memory.page import Page, parse_page, render_page
from bot.memory.pageid import (
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
    kind of page that has any, a `- [[id]]: summary` line per page by id. A
    summary is put on one line; an empty one is replaced by the default."""
    parts = [INDEX_HEADING] + ([block] if block else [])
    for kind, heading in _SECTIONS:
        lines = [
            f"- [[{page_id}]]: {' '.join(summary.split()) or default_summary(page_id)}"
            for page_id, summary in sorted(summaries.items())
            if page_type(page_id) == kind
        ]
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


def _open_log(path: Path, heading: str) -> tuple[int, str]:
    """A descriptor appending to the log file at `path` (following a link), and
    what to write first: `heading` for a new file, a line end for a file that
    lacks its last one. Raises OSError when something else is in its place."""
    try:
        return os.open(path, files.CREATE_FLAGS | os.O_APPEND, 0o644), heading
    except FileExistsError:
        pass
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file; move it away", str(path))
    last = os.pread(fd, 1, info.st_size - 1) if info.st_size else b"\n"
    return fd, "" if last == b"\n" else "\n"


class Wiki:
    """The pages, catalog, logs and .meta of the wiki folder `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._meta = root / ".meta" / "index.json"

    def _page_files(self) -> list[tuple[str, Path]]:
        """(id, path) of each regular `.md` file whose path makes a valid id, by
        id; dot-folders are skipped and each linked folder is walked once."""
        found: list[tuple[str, Path]] = []
        seen: set[tuple[int, int]] = set()

        def walk(folder: Path, prefix: str) -> None:
            try:
                info = folder.stat()
                with os.scandir(folder) as scan:
                    entries = [entry for entry in scan if not entry.name.startswith(".")]
            except (FileNotFoundError, NotADirectoryError):
                return
            if (info.st_dev, info.st_ino) in seen:
                return
            seen.add((info.st_dev, info.st_ino))
            for entry in entries:
                name = prefix + entry.name
                if entry.is_dir():
                    if len(name) < MAX_ID_CHARS:
                        walk(Path(entry.path), name + "/")
                elif name.endswith(".md") and is_wiki_page_id(name[:-3]) and entry.is_file():
                    found.append((name[:-3], Path(entry.path)))

        walk(self.root, "")
        return sorted(found)

    def _scan(self) -> Iterator[tuple[str, bytes, Page | None]]:
        """(id, file bytes, page) for every page file; the page is None, with a
        `wiki.page_unreadable` warning, when it cannot be parsed."""
        for page_id, path in self._page_files():
            data = files.read_regular(path)
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
        """Page `page_id`, following a link at its path; None when no regular
        file is there. Raises InvalidWikiPageIdError, PageFormatError, OSError."""
        data = files.read_regular(page_path(self.root, page_id))
        return None if data is None else parse_page(_decode(data, page_id), page_id)

    def write_page(self, page: Page) -> None:
        """Write `page` whole through a new file and a rename in its folder,
        making the folders it needs; a link at its path is followed, so the file
        it points to is rewritten. Raises InvalidWikiPageIdError, WikiPathRefused
        when the file system refuses the path, and OSError for any other failure."""
        path = page_path(self.root, page.id)
        with _refusals(page.id):
            path.parent.mkdir(parents=True, exist_ok=True)
            target = Path(os.path.realpath(path)) if path.is_symlink() else path
            files.replace_file(target, render_page(page).encode("utf-8"))

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
        parse is listed with its default summary. Raises OSError, writing
        nothing, when index.md is neither a regular file nor a link, or cannot
        be read or decoded.
        """
        path = self.root / "index.md"
        current = _catalog_source(path)
        summaries = {page_id: page.summary if page else "" for page_id, _, page in self._scan()}
        text = render_catalog(summaries, None if current is None else migrated_block(current))
        data = text.encode("utf-8")
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            files.replace_file(path, data)
        except OSError as exc:
            if exc.errno not in _IN_PLACE:
                raise
            log.warning("wiki.catalog_in_place", path=str(path), reason=exc.strerror)
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
            try:
                files.write_all(fd, data)
            finally:
                os.close(fd)
        return text

    def catalog_text(self) -> str | None:
        """index.md for the system prompt, read as the soul loader reads it
        (through no link at index.md, never waiting), without the migrated end
        marker. None when it is missing, a link or not a regular file (with a
        `wiki.warning`). Raises SoulLoadError when it cannot be read or decoded."""
        warnings: list[str] = []
        try:
            dir_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
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
        when it is not a JSON object, OSError when it cannot be read."""
        data = files.read_regular(self._meta)
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
        Raises TypeError for a value JSON cannot hold, OSError."""
        text = json.dumps(meta, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        self._meta.parent.mkdir(parents=True, exist_ok=True)
        files.replace_file(self._meta, text.encode("utf-8"))

    def update_meta(self, watermark: int) -> None:
        """Store `watermark` and `compiled_at` (now, UTC) with the hashes (sha256
        of each page file, by id) and backlinks ({target: [ids linking to it]},
        no self-links) recomputed from the pages; other keys in .meta are kept.
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
        self.write_meta(meta)

    def remove_stale_temps(self, older_than_s: float = 3600.0) -> int:
        """Remove the temporary files of writes a killed process left behind
        (older than `older_than_s`, so a write in flight elsewhere is spared).
        Returns how many went."""
        removed = 0
        cutoff = time.time() - older_than_s
        for temp in self.root.rglob(".wiki-*.tmp"):
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
        ValueError for a bad day, WikiPathRefused when the file system refuses
        the path, and OSError for any other failure."""
        if not _DAY.fullmatch(day):
            raise ValueError(f"a log day is YYYY-MM-DD, not {day!r}")
        date.fromisoformat(day)
        if not lines:
            return
        page_id = f"log/{day}"
        path = page_path(self.root, page_id)
        text = "".join(" ".join(line.splitlines()) + "\n" for line in lines)
        with _refusals(page_id):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, head = _open_log(path, f"# Log {day}\n\n")
            try:
                files.write_all(fd, (head + text).encode("utf-8"))
            finally:
                os.close(fd)

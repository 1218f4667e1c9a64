"""What a restore checks of a backup's members taken together, before it writes
anything (bot/storage/backup.py checks each member alone first):

- every link, followed link by link through the archive's own links as the
  extraction makes them, stays in its folder (data_dir/ or workspaces/), and no
  member lies beyond a link. tarfile's "data" filter, kept as a second guard,
  checks each link against the disk as it is when that link is written, so a
  link written before the links it goes through passed it; and it had further
  link-chain bypasses, fixed only in Python 3.11.13, 3.12.11 and 3.13.4
  (CVE-2025-4517 and others);
- the files fit: their sizes together are at most `max_size`, and on each disk
  a folder is unpacked on, at most its free space less `RESERVE`, so that a
  small gzip bomb cannot fill the disk.
"""

from __future__ import annotations

import posixpath
import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path

from bot.errors import SoulbotError

MAX_SIZE = 64 << 30  # bytes a restore unpacks at most
RESERVE = 64 << 20  # bytes a restore leaves free on a disk
BLOCK = 4096  # bytes every member takes on disk, at least
LINK_HOPS = 40  # Linux follows at most 40 links in a path: a longer chain leads nowhere


def size_text(count: int) -> str:
    """`count` bytes for a person: 512 bytes, 3.4 KiB, 12.0 MiB, 1.2 GiB."""
    if count < 1024:
        return f"{count} bytes"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def check_links(members: Sequence[tarfile.TarInfo], archive: Path) -> None:
    """Refuse a symbolic link that leads out of its folder once the links on its
    way are followed, and a member whose path goes through a link. Raises
    SoulbotError (one line) naming the member."""
    links = {m.name: m.linkname for m in members if m.issym()}
    for member in members:
        parts = member.name.split("/")
        above = ("/".join(parts[:i]) for i in range(1, len(parts)))
        through = next((folder for folder in above if folder in links), None)
        if through is not None:
            problem = f"inside the link {through}"
        elif member.issym() and not _stays(member.name, links):
            problem = f"a link out of {parts[0]}/ ({member.linkname}), followed link by link"
        else:
            continue
        raise SoulbotError(f"{archive}: member {member.name!r}: {problem}; nothing was restored")


def _stays(name: str, links: dict[str, str]) -> bool:
    """Whether the link `name` leads into its folder (the first part of its
    name), each link of `links` on its way followed as the system would."""
    done = name.split("/")[:-1]  # the folder the link is in
    todo = links[name].split("/")
    hops = 1
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if len(done) == 1:  # above its folder
                return False
            done.pop()
            continue
        done.append(part)
        target = links.get("/".join(done))
        if target is not None:
            if posixpath.isabs(target):
                return False
            hops += 1
            if hops > LINK_HOPS:  # the system gives up too (ELOOP): it leads nowhere
                return True
            done.pop()
            todo = target.split("/") + todo
    return True


def check_room(parts: dict[str, list[tarfile.TarInfo]], targets: dict[str, Path],
               archive: Path, max_size: int = MAX_SIZE) -> None:  # fmt: skip
    """Refuse an archive whose members (`parts`, by folder, unpacked beside each
    folder's target in `targets`) take more than `max_size` together, or more
    than the free space of a disk they go to, less `RESERVE`. Raises
    SoulbotError (one line)."""
    needs: dict[int, tuple[Path, int]] = {}  # by disk: a folder on it, the bytes it gets
    total = 0
    for root, target in targets.items():
        size = sum(m.size + BLOCK for m in parts.get(root, ()))
        total += size
        where = _existing(target.parent)
        disk = where.stat().st_dev
        needs[disk] = (where, needs.get(disk, (where, 0))[1] + size)
    if total > max_size:
        raise SoulbotError(
            f"{archive}: refused: it unpacks to {size_text(total)}, more than the "
            f"{size_text(max_size)} a restore takes (a damaged or hostile file?); "
            "nothing was restored"
        )
    for where, size in needs.values():
        free = shutil.disk_usage(where).free
        if size + RESERVE > free:
            raise SoulbotError(
                f"{archive}: refused: it unpacks to {size_text(size)} on the disk of {where}, "
                f"which has {size_text(free)} free (a restore leaves {size_text(RESERVE)}): "
                "free some space, or restore elsewhere; nothing was restored"
            )


def _existing(path: Path) -> Path:
    """`path`, or its nearest folder above that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path

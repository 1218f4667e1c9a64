"""A writer that keeps committing history rows while a test copies the database."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

INSERT = (
    "INSERT INTO history (session, generation, role, kind, content, tokens, ts) "
    "VALUES ('s', 0, 'user', 'message', ?, 1, 0)"
)


class Writer(threading.Thread):
    """Inserts history rows, one transaction each, until stopped; `last` is
    the id of the last row committed."""

    def __init__(self, db: Path) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.last = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self._progress = threading.Condition()

    def run(self) -> None:
        conn = sqlite3.connect(self.db, isolation_level=None, timeout=10)
        try:
            while not self.stop.is_set():
                row = conn.execute(INSERT, ("x" * 200,)).lastrowid
                with self._progress:
                    self.last = row or 0
                    self._progress.notify_all()
        except BaseException as exc:
            self.error = exc
        finally:
            conn.close()
            with self._progress:
                self.stop.set()
                self._progress.notify_all()

    def reach(self, row: int) -> None:
        """Wait (10 s at most) until row `row` is committed."""
        with self._progress:
            done = self._progress.wait_for(lambda: self.last >= row or self.stop.is_set(), 10)
        assert done and self.error is None and self.last >= row, self.error

"""The processes sharing one store, and what a second one changes.

`Cluster` (cluster.py) is the one face, made once by the runtime:
- `owners`/`owner_of` (ownership.py): which process a conversation belongs to,
  by its Discord shard, by Telegram, or its own terminal; start-up recovery
  answers only its own;
- `topology` (topology.py): this process's row of `processes` and the start-up
  checks against the live ones (`soulbot check` reads them, registering nothing);
- `leases` (leases.py): which process answers a conversation now;
- `wiki_lock` (wikilock.py): the lock of one wiki, with the erase epoch a
  compile checks before it writes;
and locks.py: a named lock for work one process at a time does (retention).

On SQLite a process is alone on its store: it owns every conversation, takes no
lease, registers nowhere, and its wiki locks are file locks. On PostgreSQL all
of it is in the store. docs/architecture.md draws it.
"""

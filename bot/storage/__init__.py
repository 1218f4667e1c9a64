"""The disk: the SQLite thread, safe file reads and atomic writes, strict YAML."""

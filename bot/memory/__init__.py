"""Long-term memory: traces in SQLite, the markdown wiki, the compile, recall."""

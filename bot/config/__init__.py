"""soulbot.yaml: the schema, loading it, its error lines, the generated reference.
Imports no domain module."""

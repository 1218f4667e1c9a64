"""Souls: workspace folders (SOUL.md and its companions) loaded into `Soul` objects."""

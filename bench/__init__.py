"""Benchmarks: each bench/*.py is a script that prints one JSON line."""

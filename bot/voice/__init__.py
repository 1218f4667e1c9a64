"""Voice: notes heard (transcribed) and replies spoken (speech.py, encode.py)."""

"""Voice: voice notes heard (their format and length read, transcribed) and replies spoken
(speech.py, encode.py)."""

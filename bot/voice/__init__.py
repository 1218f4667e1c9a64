"""Voice: the audio of voice notes read (its format and length) and transcribed."""

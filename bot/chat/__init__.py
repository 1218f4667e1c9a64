"""Conversations: the router and its gate, chat commands, sessions and their
history, a turn, the heartbeat's reflections."""

"""Platform adapters: each turns a platform's events into our own dataclasses at the edge."""

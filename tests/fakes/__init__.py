"""Loopback fakes of the remote services, driven by the real SDKs in tests."""

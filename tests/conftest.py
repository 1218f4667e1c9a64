from __future__ import annotations

import os

# httpx (inside the SDKs) honours proxy variables; tests talk to 127.0.0.1 only.
os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

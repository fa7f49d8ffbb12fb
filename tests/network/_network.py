"""A plain-HTTP client through a proxy, from the stdlib alone (requests and httpx are not core
dependencies, and the minimal test environments lack them)."""

from __future__ import annotations

import urllib.error
import urllib.request


def fetch(
    url: str, proxy: str, *, headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, bytes]:
    """(status, body) of a request to a plain http:// URL through `proxy`; raises OSError on a cut."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with opener.open(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()

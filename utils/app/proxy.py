"""The Proxy page's support: what a running `cli.py proxy` reports about its recent traffic."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from config import Settings


def default_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.proxy_port}"


def recent_traffic(url: str, api_key: str | None, timeout: float = 3.0) -> dict[str, Any]:
    """The proxy's `/api/proxy/recent`; raises httpx.HTTPError when it does not answer."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    response = httpx.get(f"{url.rstrip('/')}/api/proxy/recent", headers=headers, timeout=timeout)
    response.raise_for_status()
    return response.json()


def unreachable_text(url: str, error: httpx.HTTPError) -> str:
    """Why the Proxy page shows no traffic for `url`, in words, and how to start a proxy there."""
    if isinstance(error, httpx.HTTPStatusError):
        why = (f"something answers there, but not as a speculative proxy (HTTP {error.response.status_code} "
               "for /api/proxy/recent)")
    elif isinstance(error, httpx.TimeoutException):
        why = "something there took too long to answer"
    elif isinstance(error, httpx.ConnectError):
        why = "nothing listens at that address"
    else:
        why = f"the request failed ({error})"
    port = url.rstrip("/").rsplit(":", 1)[-1]
    port = port if port.isdigit() else "PORT"
    return (f"No proxy answers at {url}: {why}. Start one with `python cli.py proxy --upstream URL --port {port}` "
            "(URL: the Ollama server it fronts), or enter the address of a running one above.")


def rows(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One table row per request, newest first, in words and rounded figures."""
    table = []
    for request in requests:
        speculative = request["mode"] == "speculative"
        drafted = request.get("drafted_tokens") or 0
        table.append({
            "time": datetime.fromtimestamp(request["time"]).strftime("%H:%M:%S"),
            "client": request.get("client", ""),
            "endpoint": request.get("endpoint", ""),
            "model": request.get("model", ""),
            "served": f"speculative ({request.get('drafter')})" if speculative else "forwarded",
            "tokens": request.get("output_tokens") if speculative else None,
            "acceptance": f"{request['acceptance_rate']:.0%} of {drafted}" if speculative and drafted else "",
            "tokens/s": round(request["tokens_per_second"], 1) if speculative else None,
            "why forwarded": request.get("reason", ""),
        })
    return table


def totals(requests: list[dict[str, Any]]) -> dict[str, Any]:
    speculative = [r for r in requests if r["mode"] == "speculative"]
    drafted = sum(r.get("drafted_tokens") or 0 for r in speculative)
    accepted = sum(round((r.get("acceptance_rate") or 0) * (r.get("drafted_tokens") or 0)) for r in speculative)
    return {"requests": len(requests), "speculative": len(speculative),
            "forwarded": len(requests) - len(speculative),
            "acceptance": accepted / drafted if drafted else None}

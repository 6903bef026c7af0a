"""Console page latency probe: logs in over the REST API, then loops over
console pages and REST reads on one keep-alive HTTPS connection (TLS
verified against the appliance certificate), timing each request.

    console_latency.py URL CAFILE USER PASSWORD SECONDS LABEL

Prints one JSON line: label, requests, p50/p90/p99/max ms, errors. A
measurement for bench/run-console.sh, not a test."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time
from urllib.parse import urlparse

PAGES = ["/", "/partials/dashboard", "/limits", "/fields", "/api/v1/status", "/api/v1/plan"]
PAUSE_S = 0.05  # an operator's browser, not a load generator


def main() -> int:
    url, cafile, user, password, seconds, label = sys.argv[1:7]
    u = urlparse(url)
    ctx = ssl.create_default_context(cafile=cafile)
    conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=10)
    body = json.dumps({"username": user, "password": password})
    conn.request("POST", "/api/v1/login", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    token = json.loads(resp.read())["token"]
    headers = {"Cookie": f"uagate_token={token}"}
    samples: list[float] = []
    errors = 0
    end = time.monotonic() + float(seconds)
    i = 0
    while time.monotonic() < end:
        path = PAGES[i % len(PAGES)]
        i += 1
        t0 = time.perf_counter()
        try:
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            r.read()
            ok = r.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
            conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=10)
        dt = (time.perf_counter() - t0) * 1000
        if ok:
            samples.append(dt)
        else:
            errors += 1
        time.sleep(PAUSE_S)
    samples.sort()

    def q(p: float) -> float | None:
        if not samples:
            return None
        return round(samples[min(len(samples) - 1, int(p * len(samples)))], 2)

    print(json.dumps({"label": label, "requests": len(samples), "p50_ms": q(0.5), "p90_ms": q(0.9),
                      "p99_ms": q(0.99), "max_ms": round(samples[-1], 2) if samples else None,
                      "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

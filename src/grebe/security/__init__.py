"""Who may call grebe's network surfaces, and what leaves them.

    keys.py      API keys: config model, hashed key store, constant-time check, new keys
    settings.py  the HTTP hygiene settings shared by `grebe serve` and `feed-serve`
    guard.py     ASGI middleware: Host allowlist and no cross-origin browser requests
    authn.py     ASGI middleware: bearer (or basic) credentials checked against the keys
    ratelimit.py per-key request budgets (the `limits` library)
    server.py    uvicorn with header/idle timeouts; refusing a non-loopback bind without keys
    grpc_guard.py gRPC: bearer metadata interceptor, INVALID_ARGUMENT for bad protobufs, TLS
    scrub.py     credentials removed from URLs, upstream errors and log lines

The rules and their reasons are in docs/security.md.
"""

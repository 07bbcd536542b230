"""`grebe serve`: the pipeline and a live HTTP API in one process.

    body.py     request bodies: application/json only, bounded in size, time and depth
    intake.py   POST /v1/posts: validate with grebe.codec, append to the intake stream
    analysis.py POST /v1/analyze: the flows' Analyzer, started on first use
    status.py   the status snapshot (streams, lag, dispatcher, engines, uptime)
    page.py     that snapshot as a small self-refreshing HTML page
    service.py  the running parts (Runtime, intake, store, analyzer) and their lifecycle
    app.py      the Starlette routes, behind grebe.security's guards (keys, Host, Origin)
    server.py   uvicorn on a socket bound up front; SIGTERM stops intake, then drains
"""

"""The status snapshot as a small HTML page: server-rendered, no script, reloaded by a
meta refresh. Every value from the snapshot is escaped (stream names come from config,
failure reasons from engines)."""

from __future__ import annotations

from html import escape
from typing import Any

STATE_COLOURS = {"running": "#1a7f37", "starting": "#9a6700", "draining": "#9a6700",
                 "stopped": "#cf222e"}

STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;
max-width:60rem;padding:0 1rem;color:#1f2328;background:#fff}
h1{font-size:1.5rem;margin:0 0 .25rem}h2{font-size:1.05rem;margin:1.75rem 0 .5rem}
.sub{color:#59636e;margin:0 0 1rem}.state{color:#fff;border-radius:1rem;padding:.1rem .6rem;
font-size:.85rem;font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(8.5rem,1fr));gap:.6rem}
.card{border:1px solid #d1d9e0;border-radius:.5rem;padding:.55rem .75rem}
.card b{display:block;font-size:1.45rem;font-variant-numeric:tabular-nums}
.card span{color:#59636e;font-size:.8rem;text-transform:uppercase;letter-spacing:.03em}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .6rem;
border-bottom:1px solid #d1d9e0}th{color:#59636e;font-weight:600;font-size:.85rem}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}.warn{color:#cf222e}
.cards+.sub{margin-top:.6rem}footer{margin-top:2rem;color:#59636e;font-size:.85rem}a{color:#0969da}
"""


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def _number(value: Any) -> str:
    return "?" if value is None else f"{value:,}" if isinstance(value, int) else escape(str(value))


def _qps(value: float | None) -> str:
    return f"{value:g}" if value else "—"


def _cards(items: list[tuple[str, Any]]) -> str:
    return "".join(
        f'<div class="card"><b>{_number(value)}</b><span>{escape(label)}</span></div>'
        for label, value in items
    )


def _streams(streams: list[dict[str, Any]]) -> str:
    rows = "".join(
        "<tr>"
        f"<td>{escape(s['name'])}</td><td>{escape(s['broker'])}</td>"
        f"<td>{escape(s['topic'])}</td><td>{escape(', '.join(s['eligibilities']))}</td>"
        f'<td class="n">{_number(s["lag"])}</td>'
        f'<td class="n">{_qps(s["max_qps"])}</td>'
        "</tr>"
        for s in streams
    )
    return (
        "<table><thead><tr><th>stream</th><th>broker</th><th>topic</th><th>eligibilities</th>"
        '<th class="n">lag</th><th class="n">max qps</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def render_status(status: dict[str, Any], refresh_s: int) -> str:
    state = str(status["state"])
    colour = STATE_COLOURS.get(state, "#59636e")
    d = status["dispatcher"]
    engines = status["engines"]
    api = status["api"]
    engine_line = (
        f"{engines['alive']} of {engines['configured']} engine process(es) alive"
        if engines["mode"] == "processes" else "plans run inside this process (inline)"
    )
    if engines["pids"]:
        engine_line += f" — pids {', '.join(str(p) for p in engines['pids'])}"
    failure = (
        f'<p class="warn">engines down, restarting: {escape(str(engines["failure"]))}</p>'
        if engines.get("failure") else ""
    )
    dispatcher_cards = _cards([
        ("received", d.get("received")), ("done", d.get("done")),
        ("retried", d.get("retried")), ("dead-lettered", d.get("dead")),
        ("in flight", d.get("in_flight")), ("poll errors", d.get("poll_errors")),
    ])
    api_cards = _cards([
        ("posts accepted", api["posts_accepted"]), ("requests refused", api["requests_refused"]),
        ("analyzed", api["analyzed"]),
    ])
    intake = escape(str(api["intake_stream"] or "—"))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{int(refresh_s)}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>grebe — {escape(state)}</title><style>{STYLE}</style></head>
<body>
<h1>grebe <span class="state" style="background:{colour}">{escape(state)}</span></h1>
<p class="sub">version {escape(str(status["version"]))} · up {_duration(status["uptime_s"])}
 · refreshes every {int(refresh_s)} s</p>
<h2>Dispatcher</h2><div class="cards">{dispatcher_cards}</div>
<h2>Streams</h2>{_streams(status["streams"])}
<h2>Engines</h2><p>{escape(engine_line)}</p>{failure}
<h2>API</h2><div class="cards">{api_cards}</div>
<p class="sub">POST /v1/posts appends to stream <b>{intake}</b>.</p>
<footer><a href="/v1/status">/v1/status</a> · <a href="/metrics">/metrics</a> ·
<a href="/readyz">/readyz</a></footer>
</body></html>
"""

"""The demo's HTML report: the summary, then example posts per flow with their labels,
scores and reasons. One self-contained file (inline CSS, images by file URL); every
value from a post is escaped."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grebe.commands.demo_set import DemoPost
    from grebe.commands.demo_summary import DemoSummary
    from grebe.types import Annotation

EXAMPLES_PER_FLOW = 6
TEXT_CHARS = 280
CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ddd;padding:.3rem .6rem}
th{background:#f4f4f4;text-align:left}.card{border:1px solid #ddd;border-radius:6px;
padding:.8rem;margin:.6rem 0;display:flex;gap:1rem}.card img{max-width:160px;max-height:120px}
.label{display:inline-block;background:#eef;border-radius:4px;padding:0 .4rem;margin:0 .2rem}
.spam,.nsfw,.hate,.offensive,.harassment,.violence,.self_harm,.sexual{background:#fdd}
.safe,.not_spam,.banger_candidate{background:#dfd}small{color:#666}pre{white-space:pre-wrap}
"""


def _labels(labels: list[str]) -> str:
    return " ".join(
        f'<span class="label {escape(label.split(":")[0])}">{escape(label)}</span>'
        for label in labels
    )


def _card(item: DemoPost, annotation: Annotation) -> str:
    post = item.post
    media = "".join(
        f'<img src="{escape(m.url)}" alt="">' if m.kind == "image"
        else f'<video src="{escape(m.url)}" controls width="200"></video>'
        for m in post.media
    )
    parent = item.envelope.context.parent if item.envelope.context else None
    in_reply = (f"<small>in reply to: {escape(parent.text[:120])}</small><br>"
                if parent is not None else "")
    scores = ", ".join(f"{escape(k)} {v:.2f}" for k, v in annotation.scores.items())
    reasons = "".join(f"<li><b>{escape(k)}</b>: {escape(v[:300])}</li>"
                      for k, v in annotation.reasons.items())
    extra = (f"<br><small>transcript: {escape(annotation.transcript[:300])}</small>"
             if annotation.transcript else "")
    if annotation.embedding:
        extra += f"<br><small>embedding: {len(annotation.embedding)} dims</small>"
    text = post.text if len(post.text) <= TEXT_CHARS else post.text[:TEXT_CHARS] + "…"
    return (
        f'<div class="card">{media}<div><small>{escape(post.id)} · {escape(item.kind)} · '
        f"{escape(item.topic)}</small><br>{in_reply}<pre>{escape(text)}</pre>"
        f"{_labels(annotation.labels)}<br><small>{scores}</small><ul>{reasons}</ul>{extra}"
        "</div></div>"
    )


def _pick(examples: list[tuple[DemoPost, Annotation]]) -> list[tuple[DemoPost, Annotation]]:
    """A varied sample: media posts and written cases first, then one per label set."""
    ranked = sorted(examples, key=lambda e: (e[0].kind in ("ham", "spam"), e[0].post.id))
    chosen, seen = [], set()
    for item, annotation in ranked:
        key = (item.kind, tuple(sorted(annotation.labels)))
        if key not in seen:
            seen.add(key)
            chosen.append((item, annotation))
        if len(chosen) == EXAMPLES_PER_FLOW:
            break
    return chosen


def render(summary: DemoSummary) -> str:
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{s.runs}</td>"
        f"<td>{s.statuses.get('success', 0)}</td><td>{s.statuses.get('skipped', 0)}</td>"
        f"<td>{s.statuses.get('failed', 0)}</td><td>{s.percentile(50) * 1000:.0f} ms</td>"
        f"<td>{s.percentile(95) * 1000:.0f} ms</td>"
        f"<td>{escape(', '.join(f'{k} {v}' for k, v in s.labels.most_common(6)))}</td></tr>"
        for name, s in summary.flows.items()
    )
    sections = "".join(
        f"<h2>{escape(flow)}</h2>" + "".join(_card(i, a) for i, a in _pick(items))
        for flow, items in sorted(summary.examples.items())
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>grebe demo</title>"
        f"<style>{CSS}</style></head><body><h1>grebe demo</h1>"
        f"<p>{summary.messages} messages ({summary.posts} distinct posts) in "
        f"{summary.processing_s:.1f} s — {summary.posts_per_s:.1f} posts/s; "
        f"{summary.annotations} annotations, {summary.dead_lettered} dead-lettered; "
        f"models loaded in {summary.startup_s:.1f} s.</p>"
        f"<p>{escape(summary.spam_agreement())}</p>"
        "<table><tr><th>flow</th><th>runs</th><th>annotated</th><th>skipped</th>"
        "<th>failed</th><th>p50</th><th>p95</th><th>top labels</th></tr>"
        f"{rows}</table>{sections}</body></html>"
    )


def write_report(summary: DemoSummary, path: Path) -> Path:
    path.write_text(render(summary), encoding="utf-8")
    return path

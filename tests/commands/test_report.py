from __future__ import annotations

from pathlib import Path

from grebe.commands.demo_set import DemoPost
from grebe.commands.demo_summary import DemoSummary, FlowStats
from grebe.commands.report import render
from grebe.types import Annotation, Envelope, Post


def test_report_escapes_post_content_and_shows_labels() -> None:
    post = Post(id="x<1>", author_id="a", text="<script>alert(1)</script> hi")
    item = DemoPost("posts", Envelope(post=post), "ham")
    annotation = Annotation(post_id=post.id, producer="post_safety", version="1",
                            labels=["safe"], scores={"nsfw": 0.01},
                            reasons={"why": "<img src=x onerror=alert(1)>"})
    stats = FlowStats("post_safety", runs=1, durations=[0.2])
    stats.statuses["success"] = 1
    stats.labels["safe"] = 1
    summary = DemoSummary(data_dir=Path("/tmp"), messages=1, posts=1, annotations=1,
                          dead_lettered=0, startup_s=1.0, processing_s=2.0,
                          flows={"post_safety": stats}, report=Path("/tmp/r.html"),
                          examples={"post_safety": [(item, annotation)]})
    html = render(summary)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<img src=x" not in html
    assert 'class="label safe">safe<' in html and "200 ms" in html

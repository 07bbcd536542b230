import json

import pytest

from grebe.api.service import ApiService
from grebe.brokers.factory import local_log
from grebe.errors import ConfigError


def post(i, text="hello world"):
    return {"id": f"p{i}", "author_id": "a", "text": f"{text} {i}"}


async def appended(config, topic="posts"):
    log = local_log(config)
    await log.open()
    try:
        return sum((await log.end_offsets(topic)).values())
    finally:
        await log.close()


async def test_submitted_posts_are_annotated_and_served(api):
    service, client = api
    one = await client.post("/v1/posts", json={"post": post(0, "LOOK AT THIS RIGHT NOW")})
    assert one.status_code == 202
    assert one.json()["post_ids"] == ["p0"]
    many = await client.post("/v1/posts", json=[post(1), post(2), {"post": post(3)}])
    assert many.status_code == 202
    body = many.json()
    assert body["accepted"] == 3 and body["stream"] == "posts"
    assert body["post_ids"] == ["p1", "p2", "p3"]
    # The ids the dispatcher will run them under: stream:partition:offset.
    for payload_id in body["payload_ids"]:
        name, partition, offset = payload_id.split(":")
        assert name == "posts" and partition.isdigit() and offset.isdigit()
    assert len(set(body["payload_ids"])) == 3

    await service.runtime.wait_caught_up()
    got = await client.get("/v1/posts/p0/annotations")
    assert got.status_code == 200
    (annotation,) = got.json()["annotations"]
    assert annotation["producer"] == "basic"
    assert "shouting" in annotation["labels"]
    got = await client.get("/v1/posts/p2/annotations")
    assert got.json()["annotations"][0]["scores"]["basic.words"] == 3.0

    missing = await client.get("/v1/posts/nope/annotations")
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]


@pytest.mark.parametrize(("body", "needle"), [
    (b'{"author_id": "x"}', "`id`"),  # a Post without its id (an id-only one is fine)
    (b'{"post": {"id": 5, "author_id": "a"}}', "str"),
    (b"[]", "no posts"),
    (b"", "empty body"),
    (b'{"id": " ", "author_id": "a"}', "post.id is empty"),
])
async def test_bad_input_is_refused_with_the_reason(api, body, needle):
    service, client = api
    response = await client.post("/v1/posts", content=body)
    assert response.status_code == 422
    assert needle in json.dumps(response.json()["problems"])
    assert await appended(service.config) == 0
    assert service.metrics.requests_refused == 1


async def test_one_bad_item_refuses_the_whole_array(api):
    service, client = api
    response = await client.post("/v1/posts", content=json.dumps(
        [post(0), {"post": {"author_id": "a"}}, post(2), "nonsense"]))
    assert response.status_code == 422
    problems = response.json()["problems"]
    assert [p["index"] for p in problems] == [1, 3]
    assert all(p["reason"].startswith("schema") for p in problems)
    assert await appended(service.config) == 0


async def test_oversized_requests_are_refused(make_api):
    service, client = await make_api(api={"max_batch": 2, "max_body_bytes": 2048})
    too_many = await client.post("/v1/posts", json=[post(0), post(1), post(2)])
    assert too_many.status_code == 413
    assert "api.max_batch" in too_many.json()["error"]
    too_big = await client.post("/v1/posts", json=post(0, "x" * 4000))
    assert too_big.status_code == 413
    assert await appended(service.config) == 0


async def test_status_reflects_counts(api):
    service, client = api
    await client.post("/v1/posts", json=[post(i) for i in range(5)])
    await client.post("/v1/posts", content=b"[1]")
    await service.runtime.wait_caught_up()
    status = (await client.get("/v1/status")).json()
    assert status["state"] == "running"
    assert status["version"]
    assert status["uptime_s"] > 0
    d = status["dispatcher"]
    assert (d["received"], d["done"], d["retried"], d["dead"], d["in_flight"]) == (5, 5, 0, 0, 0)
    (stream,) = status["streams"]
    assert stream["name"] == "posts" and stream["lag"] == 0
    assert status["engines"] == {
        "mode": "inline", "configured": 0, "alive": 1, "pids": [], "failure": None}
    assert status["api"]["posts_accepted"] == 5
    assert status["api"]["requests_refused"] == 1
    assert status["api"]["intake_stream"] == "posts"


async def test_lag_counts_posts_not_yet_handed_out(api):
    service, client = api
    await service.runtime.dispatcher.stop(0)
    # stop() may return while a poll is still under way; once the run loop has exited,
    # nothing is consumed any more.
    assert service.runtime.dispatching is not None
    await service.runtime.dispatching
    await client.post("/v1/posts", json=[post(i) for i in range(7)])
    status = (await client.get("/v1/status")).json()
    assert status["streams"][0]["lag"] == 7


async def test_status_page_renders(make_api):
    service, client = await make_api(
        streams=[{"name": "<b>posts</b>", "topic": "posts", "eligibilities": ["basic"]}])
    await client.post("/v1/posts", json=[post(i) for i in range(3)])
    await service.runtime.wait_caught_up()
    page = await client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    html = page.text
    assert '<meta http-equiv="refresh" content="5">' in html
    assert "running" in html and "version" in html
    assert "&lt;b&gt;posts&lt;/b&gt;" in html and "<b>posts</b>" not in html
    assert "<script" not in html
    assert '<b>3</b><span>done</span>' in html
    assert '<b>3</b><span>posts accepted</span>' in html


async def test_metrics_serve_the_runtime_registry(api):
    service, client = api
    await client.post("/v1/posts", json=[post(i) for i in range(3)])
    await client.post("/v1/posts", content=b"{")
    await service.runtime.wait_caught_up()
    response = await client.get("/metrics")
    assert response.status_code == 200
    body = response.text
    assert 'grebe_dispatcher_done_total{source="posts"} 3.0' in body
    assert "grebe_api_posts_accepted_total 3.0" in body
    assert 'grebe_api_requests_refused_total{reason="invalid"} 1.0' in body
    assert service.runtime.metrics_port is None  # no second metrics server


async def test_health_and_readiness_follow_the_drain(api):
    service, client = api
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).json() == {"status": "ready"}
    assert await service.drain() is True
    ready = await client.get("/readyz")
    assert ready.status_code == 503 and "stopped" in ready.json()["error"]
    assert (await client.get("/healthz")).status_code == 200
    refused = await client.post("/v1/posts", json=post(0))
    assert refused.status_code == 503
    assert await appended(service.config) == 0
    status = (await client.get("/v1/status")).json()
    assert status["state"] == "stopped"


async def test_analyze_refuses_bad_input_before_loading_models(api):
    service, client = api
    for body, status, needle in ((b"{", 400, "malformed"), (b"[]", 422, "not an array"),
                                 (b'{"post": {"text": "hi"}}', 422, "id"),
                                 (b'{"post": {"id": "1"}}', 422, "only ids"),
                                 (b'{"user": {"id": "u"}}', 422, "only ids")):
        response = await client.post("/v1/analyze", content=body)
        assert response.status_code == status
        assert needle in json.dumps(response.json())
    assert not service.analysis.loaded


async def test_unknown_intake_stream_fails_at_start(config_for):
    with pytest.raises(ConfigError, match=r"api\.stream 'other' is not a configured stream"):
        await ApiService(config_for(api={"stream": "other"})).start()

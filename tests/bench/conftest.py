"""Fixtures of the bench tests: a fake OpenAI server per test (its settings changed through ``app.state``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from tests.fake_openai import fake_openai_app, running_app


@pytest.fixture
def app() -> FastAPI:
    return fake_openai_app()


@pytest.fixture
def url(app: FastAPI) -> Iterator[str]:
    with running_app(app) as base_url:
        yield base_url

"""Fixtures shared by the metrics tests."""

from __future__ import annotations

import pytest

from tests.metrics.factories import RequestFactory, build_request


@pytest.fixture(scope="session")
def make_request() -> RequestFactory:
    return build_request

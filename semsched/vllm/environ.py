"""Temporary environment variables: how the adapter's configuration reaches a scheduler that vLLM builds itself."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def temporary_environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set the variables in ``values`` (``None`` unsets one) for the block, then restore what was there."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old

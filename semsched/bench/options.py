"""What a benchmark run is told: the server, the API flavour, the per-request tier fields and the limits.

Every option is checked when :class:`BenchOptions` is built; a bad one is a :class:`BenchError` naming the
command-line option and the limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, get_args
from urllib.parse import urlsplit

from semsched.core.errors import SemschedError

Endpoint = Literal["completions", "chat"]
TierFields = Literal["all", "xargs", "none"]
ENDPOINTS: tuple[str, ...] = get_args(Endpoint)
TIER_FIELDS: tuple[str, ...] = get_args(TierFields)
ENDPOINT_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 86_400.0
#: an HTTP header name (RFC 9110 token)
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
TIER_HEADER = "x-semsched-tier"


class BenchError(SemschedError):
    """Bad benchmark input or an unusable server; the message names the option and the limit."""


@dataclass(frozen=True)
class BenchOptions:
    """How to talk to the server under test.

    ``url`` is the server's root (``http://host:8000``; a trailing ``/v1`` is accepted and dropped). ``model``
    ``None`` means the first model the server lists. ``tier_fields``: ``all`` sends ``priority`` and
    ``vllm_xargs`` (tier and SLOs), ``xargs`` only ``vllm_xargs`` (plain vLLM's FCFS scheduler refuses a nonzero
    priority), ``none`` neither (and no ``x-semsched-tier`` header). ``timeout_s`` bounds each whole request.
    """

    url: str
    model: str | None = None
    endpoint: Endpoint = "completions"
    stream: bool = True
    tier_fields: TierFields = "all"
    api_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", server_root(self.url))
        if self.endpoint not in ENDPOINTS:
            raise BenchError(f"--endpoint: must be one of {', '.join(ENDPOINTS)} (got {self.endpoint!r})")
        if self.tier_fields not in TIER_FIELDS:
            raise BenchError(f"--tier-fields: must be one of {', '.join(TIER_FIELDS)} (got {self.tier_fields!r})")
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise BenchError(
                f"--timeout-s: must be a number > 0 and <= {MAX_TIMEOUT_S:g} (got {self.timeout_s:g})"
            )
        if self.model is not None and not self.model.strip():
            raise BenchError("--model: must not be empty")
        for name, value in self.headers:
            check_header(name, value)

    @property
    def generation_url(self) -> str:
        return self.url + ENDPOINT_PATHS[self.endpoint]

    def base_headers(self) -> dict[str, str]:
        """The headers every request carries: ``--header``s and the API key (the tier header is per request)."""
        headers = dict(self.headers)
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def server_root(url: str) -> str:
    """``url`` without a trailing ``/`` or ``/v1``; a :class:`BenchError` unless an http(s) URL with a host."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"--url: must be an http:// or https:// URL with a host (got {url!r})")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise BenchError(f"--url: bad port in {url!r}") from None
    if parts.query or parts.fragment:
        raise BenchError(f"--url: must have no query or fragment (got {url!r})")
    root = url.strip().rstrip("/")
    return root.removesuffix("/v1")


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` as ``(name, value)``; a :class:`BenchError` naming ``--header`` otherwise."""
    name, colon, value = text.partition(":")
    if not colon:
        raise BenchError(f"--header: {text!r} is not NAME:VALUE")
    name, value = name.strip(), value.strip()
    check_header(name, value)
    return name, value


def check_header(name: str, value: str) -> None:
    if not _HEADER_NAME.match(name):
        raise BenchError(f"--header: {name!r} is not a valid header name (letters, digits and !#$%&'*+-.^_`|~)")
    if any(c in value for c in "\r\n\0"):
        raise BenchError(f"--header: the value of {name!r} must be one line")

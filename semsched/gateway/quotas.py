"""Per-tenant quotas: requests and tokens per minute, counted over every replica (:mod:`semsched.gateway.shared`).

**Whose quota.** A request made with a key of ``api_keys`` belongs to the key's ``tenant`` (the key itself,
redacted as ``--check`` shows it, when it names none) and has the key's ``quota``, else its tier's
(``quotas.tiers.<TIER>``). A request without such a key belongs to its ``x-semsched-tenant`` (when tier headers
are trusted) with its tier's quota; one without a tenant has none. Limits are read from the gateway's
configuration at each check (it may be reloaded); a limit left out (None) is not checked.

**Counting.** A tenant's windows last :data:`QUOTA_WINDOW_S` from its first charge (then the next opens at the next
charge). At admission a request counts 1 request and its prompt tokens (the classifier's count); it is refused if
a window is spent or this charge would pass its limit (the first charge of a window always passes: no request is
refused forever), and then nothing is charged. Its output tokens are charged as they stream (every
``shared_state.sync_interval_s``) and at its end; they may take the tenant past its limit, which then refuses its
next requests until the window ends. A refusal is a 429 with ``Retry-After`` (the seconds until the window ends),
reason ``quota``, and a message naming the tenant, the limit and the field it comes from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from semsched.gateway.api import EdgeError
from semsched.gateway.config import GatewayConfig, QuotaLimits, redact_key
from semsched.gateway.shared import Charge, LocalSharedState

#: the length of a quota window (the limits are per minute)
QUOTA_WINDOW_S = 60.0


class Counted(Protocol):
    """What a request in flight tells its quota: the output tokens it has had so far."""

    output_tokens: int


@dataclass(frozen=True)
class TenantQuota:
    """A request's tenant, its limits, and where they come from (a config path, for messages)."""

    tenant: str
    limits: QuotaLimits
    source: str


@dataclass
class _Streaming:
    tenant: str
    call: Counted
    charged: int = 0


class Quotas:
    """Checks and charges quotas; ``config`` returns the gateway's configuration in force."""

    def __init__(self, shared: LocalSharedState, config: Callable[[], GatewayConfig]) -> None:
        self.shared, self.config = shared, config
        self._live: dict[str, _Streaming] = {}  # request id -> its tenant's output tokens still to charge

    def quota_of(self, headers: Mapping[str, str], tier: str) -> TenantQuota | None:
        """The tenant and limits of a request with ``headers`` and ``tier``; None when it has no quota."""
        config = self.config()
        auth = headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        entry = config.client_keys().get(key) if key else None  # inline, key_env and keys_file keys
        shown = redact_key(key) if key else ""
        if entry is not None and entry.quota is not None:
            return TenantQuota(entry.tenant or shown, entry.quota, f"api_keys.{shown}.quota")
        tier_limits = next(((name, limits) for name, limits in config.quotas.tiers.items()
                            if name.lower() == tier.lower()), None)
        if tier_limits is None:
            return None
        if entry is not None:
            tenant: str | None = entry.tenant or shown
        else:
            tenant = headers.get("x-semsched-tenant") if config.trust_tier_headers else None
        if not tenant:
            return None
        return TenantQuota(tenant, tier_limits[1], f"quotas.tiers.{tier_limits[0]}")

    async def admit(self, request_id: str, call: Counted, headers: Mapping[str, str], tier: str,
                    prompt_tokens: int) -> EdgeError | None:
        """Charge one request and its prompt tokens to its tenant, or the 429 refusing it (nothing charged).
        An admitted request's output tokens are charged as they come; call :meth:`finished` at its end."""
        quota = self.quota_of(headers, tier)
        if quota is None:
            return None
        limits = quota.limits
        charges = (Charge(_requests_key(quota.tenant), 1, limits.requests_per_minute),
                   Charge(_tokens_key(quota.tenant), prompt_tokens, limits.tokens_per_minute))
        verdict = await self.shared.check_and_charge(charges, QUOTA_WINDOW_S)
        if not verdict.ok:
            field = ("requests_per_minute", "tokens_per_minute")[verdict.refused]
            limit = charges[verdict.refused].limit
            retry_after_s = max(1, math.ceil(verdict.retry_after_s))
            this = "" if verdict.refused == 0 else f", this request's prompt {prompt_tokens}"
            return EdgeError(429, f"quota: tenant {quota.tenant!r} used {verdict.used} of its {limit} "
                                  f"{field.replace('_', ' ')} ({quota.source}.{field}{this}); retry in "
                                  f"{retry_after_s} s", param="quota", reason="quota", retry_after_s=retry_after_s)
        if limits.tokens_per_minute is not None:
            self._live[request_id] = _Streaming(quota.tenant, call)
        return None

    async def flush(self) -> None:
        """Charge the output tokens streamed since the last flush (the gateway calls it every sync)."""
        for streaming in list(self._live.values()):
            await self._charge(streaming)

    def finished(self, request_id: str) -> None:
        """The request ended: its last output tokens are charged (in the background)."""
        streaming = self._live.pop(request_id, None)
        if streaming is not None and streaming.call.output_tokens > streaming.charged:
            self.shared.background(self._charge(streaming))

    async def _charge(self, streaming: _Streaming) -> None:
        delta = streaming.call.output_tokens - streaming.charged
        if delta > 0:
            streaming.charged += delta  # before the await: a concurrent flush does not charge it twice
            await self.shared.charge(_tokens_key(streaming.tenant), delta, QUOTA_WINDOW_S)


def _requests_key(tenant: str) -> str:
    return f"quota:{tenant}:requests"


def _tokens_key(tenant: str) -> str:
    return f"quota:{tenant}:tokens"

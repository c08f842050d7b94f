"""The gateway's configuration: one YAML file, read into pydantic models (``semsched gateway --config PATH``).

Every field is checked when the file is read; an error names the field by its path (``backends[1].url``,
``admission.max_queued.PREMIUM``) and the limit, and is raised as :class:`GatewayConfigError`. The reference
with every field and its default is ``docs/gateway.md``; :func:`example_config` is the smallest working file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from semsched.core.errors import SemschedError
from semsched.core.tiers import DEFAULT_TIERS, TierSpec, tier_index


class GatewayConfigError(SemschedError):
    """A gateway configuration that cannot be used; the message names the field and the limit."""


#: what an environment variable's name may be (``api_key_env``, ``key_env``, ``admin_key_env``)
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def secret_from_env(field: str, name: str) -> str:
    """The value of environment variable ``name`` (named by ``field``); ValueError if it is unset or empty."""
    value = os.environ.get(name, "")
    if not value:
        raise ValueError(f"{field}: environment variable {name} is {'empty' if name in os.environ else 'not set'}")
    return value


def secret_from_file(field: str, path: str) -> str:
    """The first line of the file at ``path`` (named by ``field``), stripped; ValueError if unreadable or empty."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{field}: cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    if not value or not value[0].strip():
        raise ValueError(f"{field}: {path} is empty")
    return value[0].strip()


class _Strict(BaseModel):
    # allow_inf_nan=False: `.nan` or `.inf` in the file is an error naming the field, not a limit it "exceeds"
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BackendConfig(_Strict):
    """One OpenAI-compatible server (a ``vllm serve``)."""

    name: str = Field(min_length=1, max_length=64, description="label in metrics and logs; unique")
    url: str = Field(description="base URL, e.g. http://10.0.0.5:8000 (the /v1 routes are appended)")
    max_inflight: int | None = Field(default=None, ge=1, le=100_000,
        description="requests the gateway keeps in flight here at most; more wait in the gateway's priority "
                    "queue (None: no cap, every request is forwarded at once)")
    send_priority: bool = Field(default=True,
        description="true: the body's `priority` field is set to the request's priority (its tier's, or the "
                    "larger the client sent), which servers that schedule by priority order by "
                    "(semsched.vllm.Scheduler, vLLM's --scheduling-policy priority); vLLM 0.32's default FCFS "
                    "scheduler accepts and ignores it. false: the field is removed, whatever the client sent "
                    "(for a server that refuses it)")
    api_key: str | None = Field(default=None, description="sent as `Authorization: Bearer ...` to this server "
                                                          "(prefer api_key_env: no secret in the file)")
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME,
                                    description="the environment variable holding api_key")
    _key: str | None = PrivateAttr(default=None)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"must be an http(s) URL with a host (got {value!r})")
        return value.rstrip("/").removesuffix("/v1")

    @model_validator(mode="after")
    def _secret(self) -> BackendConfig:
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("api_key_env: give api_key or api_key_env, not both")
        self._key = self.api_key if self.api_key_env is None else secret_from_env("api_key_env", self.api_key_env)
        return self

    @property
    def bearer(self) -> str | None:
        """The key sent to this server (api_key, or the value of api_key_env when the file was read)."""
        return self._key


class QuotaLimits(_Strict):
    """A tenant's quota: what it may use per minute (None: no limit)."""

    tokens_per_minute: int | None = Field(default=None, ge=1, le=1 << 40,
        description="prompt tokens (charged at admission) plus output tokens (charged as they stream) per minute")
    requests_per_minute: int | None = Field(default=None, ge=1, le=1 << 30, description="requests per minute")


class ApiKeyConfig(_Strict):
    """What a client's API key stands for."""

    tier: str = Field(min_length=1, description="the tier of every request made with this key")
    tenant: str | None = Field(default=None, max_length=128,
                               description="who the client is: the request's client (Request.client), for "
                                           "per-client fairness policies, and whose quota it uses")
    key_env: str | None = Field(default=None, pattern=ENV_NAME,
                                description="the environment variable holding the key; the map's key is then "
                                            "only a label")
    quota: QuotaLimits | None = Field(default=None,
                                      description="this key's quota, instead of its tier's (quotas.tiers)")


class ClassifierConfig(_Strict):
    """What the gateway predicts from the prompt before a request is routed."""

    urgency: str = Field(default="none",
        description="`none`, `keywords` (a word list; see keywords), or `ktas:PATH` (a model saved by "
                            "`semsched urgency train`, applied to the prompt text as the chief complaint)")
    keywords: dict[str, int] = Field(default_factory=dict,
        description="for urgency `keywords`: word -> urgency level (0 = most urgent); the smallest match wins")
    length: str | None = Field(default=None,
        description="an output-length predictor spec (`semsched lengths eval` names them, e.g. "
                          "`input-length` or `semantic-knn`), fed by the gateway's own finished requests")
    tokenizer: str | None = Field(default=None,
        description="a tokenizer.json to count prompt tokens; without it, characters / 4")
    max_batch: int = Field(default=32, ge=1, le=4096, description="prompts classified together at most")
    max_wait_ms: float = Field(default=2.0, ge=0, le=10_000, description="how long a batch waits to fill")
    max_queued: int = Field(default=1024, ge=1, le=1_000_000,
        description="prompts waiting for classification at most (most important first); past it the least "
                    "important goes on at once without a classification (counted)")
    timeout_ms: float = Field(default=500.0, gt=0, le=600_000,
        description="a request whose classification takes longer goes on without it (counted)")

    @field_validator("urgency")
    @classmethod
    def _urgency(cls, value: str) -> str:
        if value in ("none", "keywords") or (value.startswith("ktas:") and len(value) > 5):
            return value
        raise ValueError(f"must be `none`, `keywords` or `ktas:PATH` (got {value!r})")


class AdmissionConfig(_Strict):
    """Admission control and load shedding per tier."""

    shedding: bool = Field(default=True,
                           description="shed less important tiers while a tier with targets is at risk "
                                             "(seed 003's monitor, fed by the gateway's TTFT/TPOT measurements)")
    guard: dict[str, Any] = Field(default_factory=dict,
        description="SLOGuardConfig fields (window_s, min_samples, shed_headroom, resume_headroom, hold_s, "
                    "protected_priority, ...): `semsched policies` lists them under `tiered`")
    max_queued: dict[str, int] = Field(default_factory=dict,
        description="tier -> requests of that tier waiting in the gateway's queue at most; more get 429 "
                    "(a tier not named: default_max_queued)")
    default_max_queued: int = Field(default=1024, ge=0, le=1_000_000,
                                    description="the queue bound of a tier that max_queued does not name")
    queue_timeout_s: float = Field(default=30.0, gt=0, le=86_400,
                                   description="longest wait for a backend slot; then 503 with Retry-After")
    request_timeout_s: float = Field(default=600.0, gt=0, le=86_400,
                                     description="longest a request may take end to end; then 504 / error event")
    stream_idle_timeout_s: float | None = Field(default=300.0, gt=0, le=86_400,
        description="longest a started stream may go without a byte from its backend; then an error event "
                    "(504) ends it (None: no limit but request_timeout_s). A preempted request's pause counts")
    retry_after_s: int = Field(default=1, ge=0, le=3600, description="the Retry-After of a 429 or 503")
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=1 << 30, description="larger bodies get 413")
    max_tokens_default: int = Field(default=256, ge=1, le=1 << 24,
                                    description="the output budget assumed for a request that sets none")
    max_n: int = Field(default=16, ge=1, le=4096,
                       description="most sequences one request may ask for (`n`, `best_of`); a request weighs "
                                   "that many against max_inflight and the queue bounds")
    max_inflight: dict[str, int] = Field(default_factory=dict,
        description="tier -> sequences of that tier in flight at most, over every replica (shared_state); more "
                    "wait for a slot of the tier, within queue_timeout_s (a tier not named: default_max_inflight)")
    default_max_inflight: int | None = Field(default=None, ge=1, le=1_000_000,
                                             description="the in-flight cap of a tier that max_inflight does not "
                                                         "name (None: no cap)")


class OutlierEjectionConfig(_Strict):
    """A backend much slower than the rest leaves the pool for a while (:mod:`semsched.gateway.outliers`)."""

    enabled: bool = Field(default=False, description="judge the backends' TTFTs and eject outliers")
    window: int = Field(default=50, ge=5, le=10_000,
                        description="the last requests per backend whose TTFT (dispatch to first token, streams) "
                                    "is judged")
    min_requests: int = Field(default=20, ge=5, le=10_000,
                              description="requests a backend needs in its window to be judged or compared with")
    factor: float = Field(default=3.0, gt=1, le=1000,
                          description="ejected when its TTFT p90 is over factor x the median of the other "
                                      "backends' p90s")
    cooldown_s: float = Field(default=30.0, gt=0, le=86_400, description="how long an ejected backend stays out")
    max_ejected_fraction: float = Field(default=0.5, gt=0, le=1,
                                        description="backends out by ejection at once at most (at least one; the "
                                                    "last backend in the pool is never ejected)")

    @model_validator(mode="after")
    def _sizes(self) -> OutlierEjectionConfig:
        if self.min_requests > self.window:
            raise ValueError(f"min_requests: at most window ({self.window}; got {self.min_requests})")
        return self


class TracingConfig(_Strict):
    """OpenTelemetry spans of each request (:mod:`semsched.gateway.tracing`); off by default."""

    exporter: Literal["none", "console", "otlp"] = Field(default="none",
        description="`none` (no tracing, no cost), `console` (spans printed as JSON) or `otlp` (OTLP/HTTP)")
    endpoint: str | None = Field(default=None,
        description="for otlp: the collector's traces URL (default: OTEL_EXPORTER_OTLP_ENDPOINT, else "
                    "http://localhost:4318/v1/traces)")
    service_name: str = Field(default="semsched-gateway", min_length=1, max_length=128)
    sample_ratio: float = Field(default=1.0, ge=0, le=1,
                                description="share of new traces recorded; a request with a sampled "
                                            "`traceparent` is always recorded")


class RoutingConfig(_Strict):
    """How a backend is chosen."""

    router: str = Field(default="least-outstanding",
                        description="`round-robin`, `least-outstanding`, `go-routing[:alpha=..;mu=..;lam=..]`, "
                                    "`min-load` or `prefix-affinity[:max_imbalance=..]` (the simulator's routers)")
    profile: str = Field(default="a100-qwen1.5-7b",
                         description="latency profile the cost-aware routers price work with")
    health_interval_s: float = Field(default=2.0, gt=0, le=3600,
                                     description="how often each backend's /health is polled")
    health_timeout_s: float = Field(default=2.0, gt=0, le=600,
                                    description="longest wait for a backend's /health, /metrics or /v1/models")
    unhealthy_after: int = Field(default=2, ge=1, le=100,
                                 description="failed checks before a backend leaves the pool")
    metrics_interval_s: float = Field(default=1.0, gt=0, le=3600,
                                      description="how often each backend's /metrics is polled")
    poll_metrics: bool = Field(default=True, description="poll the backends' /metrics (vLLM's queue and KV "
                                                         "figures beside the gateway's own accounting)")
    max_attempts: int = Field(default=3, ge=1, le=16,
                              description="backends tried for a request that has not started (connection "
                                          "refused, backend gone)")
    connect_timeout_s: float = Field(default=5.0, gt=0, le=600,
                                     description="longest wait to connect to a backend for a request")
    outlier_ejection: OutlierEjectionConfig = OutlierEjectionConfig()


class SharedStateConfig(_Strict):
    """State shared by the gateway's replicas (caps, SLO observations, quotas, load books) in Redis."""

    redis_url: str | None = Field(default=None,
        description="redis://HOST:PORT/DB of the Redis every replica uses (None: this replica's own state only)")
    key_prefix: str = Field(default="semsched", min_length=1, max_length=64,
                            description="prefix of every Redis key (replicas of one fleet share it)")
    sync_interval_s: float = Field(default=0.2, gt=0, le=60,
        description="how often a replica pushes its observations, reads the others' and their loads, and "
                    "charges streamed tokens")
    lease_ttl_s: float = Field(default=10.0, gt=0, le=3600,
        description="a slot taken by a replica that stopped renewing it (died) is free after this")
    replica_id: str | None = Field(default=None, min_length=1, max_length=128,
                                   description="this replica's name in Redis (default: host-pid)")
    connect_timeout_s: float = Field(default=1.0, gt=0, le=60, description="longest wait to connect to Redis")
    op_timeout_s: float = Field(default=0.5, gt=0, le=60,
        description="longest wait for one Redis operation; past it the replica goes on with its local state")
    reconnect_interval_s: float = Field(default=1.0, gt=0, le=600,
                                        description="how often a replica without Redis tries to reach it again")

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"must be a redis://, rediss:// or unix:// URL (got {value!r})")
        return value


class QuotasConfig(_Strict):
    """Per-tenant quotas (a tenant: an API key's ``tenant``, else the key; else ``x-semsched-tenant``)."""

    tiers: dict[str, QuotaLimits] = Field(default_factory=dict,
        description="tier -> the quota of each tenant of that tier (a key's own `quota` wins)")


class GatewayConfig(_Strict):
    """The whole file."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    backends: list[BackendConfig] = Field(min_length=1, max_length=1024)
    models: list[str] = Field(default_factory=list,
                              description="model names served (default: what the backends' /v1/models list)")
    api_keys: dict[str, ApiKeyConfig] = Field(default_factory=dict)
    require_api_key: bool = Field(default=False, description="refuse (401) requests without a known key")
    trust_tier_headers: bool = Field(default=True,
        description="take a tier from `x-semsched-tier` and a tenant from `x-semsched-tenant` when "
                          "the request has no API key of the map")
    default_tier: str = Field(default="STANDARD", description="the tier of a request that names none")
    tier_table: str | None = Field(default=None,
                                   description="a YAML tier table (`semsched tiers --yaml`); default: "
                                                     "SYSTEM, PREMIUM, STANDARD, BACKGROUND (seed 003)")
    classifier: ClassifierConfig = ClassifierConfig()
    admission: AdmissionConfig = AdmissionConfig()
    routing: RoutingConfig = RoutingConfig()
    keys_file: str | None = Field(default=None,
        description="a YAML file of more API keys, the shape of api_keys (re-read by a reload)")
    admin_key_env: str | None = Field(default=None, pattern=ENV_NAME,
                                      description="the environment variable holding the key of /admin/reload")
    admin_key_file: str | None = Field(default=None, description="a file whose first line is that key")
    tracing: TracingConfig = TracingConfig()
    _keys: dict[str, ApiKeyConfig] = PrivateAttr(default_factory=dict)
    _admin_key: str | None = PrivateAttr(default=None)
    shared_state: SharedStateConfig = SharedStateConfig()
    quotas: QuotasConfig = QuotasConfig()

    @model_validator(mode="after")
    def _unique_backends(self) -> GatewayConfig:
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"backends: names must be unique (repeated: {', '.join(duplicates)})")
        return self

    @model_validator(mode="after")
    def _secrets(self) -> GatewayConfig:
        keys: dict[str, ApiKeyConfig] = {}
        for label, entry in self.api_keys.items():
            key = label if entry.key_env is None else secret_from_env(f"api_keys.{label}.key_env", entry.key_env)
            if key in keys:
                raise ValueError(f"api_keys.{label}: the same key as another entry")
            keys[key] = entry
        if self.keys_file is not None:
            for key, entry in _read_keys_file(self.keys_file).items():
                if key in keys:
                    raise ValueError(f"keys_file: key {redact_key(key)} is also in api_keys")
                keys[key] = entry
        self._keys = keys
        if self.admin_key_env is not None and self.admin_key_file is not None:
            raise ValueError("admin_key_file: give admin_key_env or admin_key_file, not both")
        if self.admin_key_env is not None:
            self._admin_key = secret_from_env("admin_key_env", self.admin_key_env)
        elif self.admin_key_file is not None:
            self._admin_key = secret_from_file("admin_key_file", self.admin_key_file)
        return self

    def client_keys(self) -> dict[str, ApiKeyConfig]:
        """Every client API key -> its entry: api_keys (a ``key_env`` entry under its variable's value) and
        keys_file, read when the file was."""
        return self._keys

    def admin_key(self) -> str | None:
        """The key of the admin routes (None: they are off)."""
        return self._admin_key

    def tiers(self) -> tuple[TierSpec, ...]:
        """The tier table in force (checked against every tier name the file uses by :func:`load_config`)."""
        if self.tier_table is None:
            return DEFAULT_TIERS
        from semsched.policies.tier_table import load_tier_table

        return load_tier_table(self.tier_table)


def _read_keys_file(path: str) -> dict[str, ApiKeyConfig]:
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"keys_file: cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    except yaml.YAMLError as error:
        raise ValueError(f"keys_file: {path} is not valid YAML ({error})") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ValueError(f"keys_file: {path} must map each key to {{tier, tenant}} "
                         f"(got {type(document).__name__})")
    keys: dict[str, ApiKeyConfig] = {}
    for label, entry in document.items():
        where = f"keys_file: {path}: key {redact_key(str(label))}"
        try:
            parsed = ApiKeyConfig.model_validate(entry)
        except ValidationError as error:
            first = error.errors()[0]
            raise ValueError(f"{where}: {_location(tuple(first['loc']))}: {first['msg']}") from None
        key = str(label) if parsed.key_env is None else secret_from_env(f"{where}: key_env", parsed.key_env)
        keys[key] = parsed
    return keys


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(file)"


def parse_config(document: object, *, source: str = "gateway config") -> GatewayConfig:
    """A :class:`GatewayConfig` from a parsed YAML/JSON document, every field and tier name checked."""
    if not isinstance(document, dict):
        raise GatewayConfigError(f"{source}: must be a mapping of settings (got {type(document).__name__})")
    try:
        config = GatewayConfig.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        message = str(first["msg"]).removeprefix("Value error, ")
        where = f"{_location(tuple(first['loc']))}: " if first["loc"] else ""  # (a message of the whole names it)
        raise GatewayConfigError(f"{source}: {where}{message}{more}") from None
    try:
        names = tier_index(config.tiers())
    except SemschedError as error:
        raise GatewayConfigError(f"{source}: tier_table: {error}") from None
    known = {name.lower() for name in names}
    used = [("default_tier", config.default_tier)]
    used += [(f"api_keys.{key}.tier", entry.tier) for key, entry in config.api_keys.items()]
    inline = set(config.api_keys.values())
    used += [(f"keys_file: key {redact_key(key)}: tier", entry.tier)
             for key, entry in config.client_keys().items()
             if entry not in inline]
    used += [(f"admission.max_queued.{tier}", tier) for tier in config.admission.max_queued]
    used += [(f"admission.max_inflight.{tier}", tier) for tier in config.admission.max_inflight]
    used += [(f"quotas.tiers.{tier}", tier) for tier in config.quotas.tiers]
    for field, tier in used:
        if tier.lower() not in known:
            raise GatewayConfigError(f"{source}: {field}: unknown tier {tier!r}; the tier table has "
                                     f"{', '.join(names)}")
    for tier, limit in config.admission.max_queued.items():
        if not 0 <= limit <= 1_000_000:
            raise GatewayConfigError(f"{source}: admission.max_queued.{tier}: must be from 0 to 1000000 "
                                     f"(got {limit})")
    for tier, limit in config.admission.max_inflight.items():
        if not 1 <= limit <= 1_000_000:
            raise GatewayConfigError(f"{source}: admission.max_inflight.{tier}: must be from 1 to 1000000 "
                                     f"(got {limit})")
    return config


def load_config(path: str | Path) -> GatewayConfig:
    """Read and check a gateway YAML file."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise GatewayConfigError(f"--config: cannot read {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise GatewayConfigError(f"{path}: not valid YAML ({error})") from None
    return parse_config(document, source=str(path))


def redact_key(secret: str) -> str:
    """A key as ``--check`` shows it: its first three characters and a short hash of the whole, so that distinct
    keys stay distinct (``sk-...#1a2b3c4d``) and none can be read back."""
    digest = hashlib.sha256(secret.encode()).hexdigest()[:8]
    return f"{secret[:3]}...#{digest}" if len(secret) > 6 else f"...#{digest}"


def shown_settings(config: GatewayConfig) -> dict[str, Any]:
    """The settings in force as ``--check`` prints them, every key redacted (:func:`redact_key`)."""
    settings = config.model_dump(mode="json")
    settings["api_keys"] = {redact_key(key): entry.model_dump(mode="json")
                            for key, entry in config.client_keys().items()}
    for backend, model in zip(settings["backends"], config.backends, strict=True):
        if model.bearer:
            backend["api_key"] = redact_key(model.bearer)
    url = settings["shared_state"].get("redis_url")
    if url and urlsplit(url).password:  # redis://:PASSWORD@host: the password redacted
        parts = urlsplit(url)
        settings["shared_state"]["redis_url"] = parts._replace(netloc=parts.netloc.replace(
            f":{parts.password}@", f":{redact_key(parts.password or '')}@")).geturl()
    return settings


def config_version(config: GatewayConfig) -> str:
    """A short hash of the settings in force, the keys read from files and variables included: what ``/health``
    names (it changes with any setting or key, and reveals none)."""
    digest = hashlib.sha256(config.model_dump_json().encode())
    for key in sorted(config.client_keys()):
        digest.update(b"\0" + key.encode())
    for backend in config.backends:
        digest.update(b"\0" + (backend.bearer or "").encode())
    digest.update(b"\0" + (config.admin_key() or "").encode())
    return digest.hexdigest()[:12]


def example_config(urls: list[str]) -> dict[str, Any]:
    """The smallest useful configuration for backends at ``urls`` (what ``docs/gateway.md`` starts from)."""
    return {"backends": [{"name": f"vllm-{i}", "url": url} for i, url in enumerate(urls)]}


Outcome = Literal["ok", "rejected", "error", "timeout", "cancelled"]

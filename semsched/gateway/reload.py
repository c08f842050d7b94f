"""Hot reload: the gateway re-reads its configuration file on SIGHUP or ``POST /admin/reload``.

:func:`reload_config` reads and checks the file the gateway was started with (``semsched gateway --config``). A
file that does not load (bad YAML, a field out of its limits, an unset ``key_env`` variable, an unreadable
``keys_file``) is refused: the error is logged and answered, and the configuration in force stays. A good one is
put in force at once, in one step of the event loop (no request sees half of it): ``Gateway.config`` is swapped
for the new object, which everything reads per request (API keys, tiers of keys, admission bounds and timeouts,
``routing.max_attempts``, ``models``, and helpers' sections such as quotas).

Backends are matched by name. A new name is added at the next index (healthy until its first check fails); a
name that is gone, or whose settings changed (URL, ``max_inflight``, key, ...), is drained: it takes no new
request, its requests in flight finish there, then it is retired (no longer polled). A changed one is replaced
by a new backend of the same name at a new index. Indices are never reused or renumbered, so routers' books
stay right; a retired backend's view looks full, and a router that still picks it is answered with the least
loaded backend in the pool.

Settings that only take effect at start (``RESTART_ONLY``: the listen address, the tier table, the classifier,
tracing, the router and its profile, the polling intervals, the guard) keep their running values when the file
changes them; the answer and the log name them (``restart_required``), as does ``/health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from semsched.gateway.config import GatewayConfig, GatewayConfigError, config_version, load_config, parse_config

if TYPE_CHECKING:
    from semsched.gateway.backends import Backend
    from semsched.gateway.service import Gateway

log = logging.getLogger("semsched.gateway")

#: reload outcomes (the ``outcome`` label of ``semsched_gateway_reloads_total``)
RELOAD_OUTCOMES = ("applied", "unchanged", "refused")
#: settings a reload cannot change: the running value is kept and the change reported (section -> fields;
#: an empty tuple: the whole section). Sections other helpers add are named here too and skipped when absent.
RESTART_ONLY: dict[str, tuple[str, ...]] = {
    "host": (), "port": (), "tier_table": (), "classifier": (), "tracing": (), "shared_state": (),
    "routing": ("router", "profile", "health_interval_s", "health_timeout_s", "metrics_interval_s", "poll_metrics",
                "connect_timeout_s"),
    "admission": ("shedding", "guard"),
}


@dataclass
class ReloadResult:
    """What one reload did (``POST /admin/reload`` answers it as JSON)."""

    outcome: str
    version: str
    added: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)  # removed: they finish their requests, then leave
    replaced: list[str] = field(default_factory=list)  # settings changed: drained, and a new one added
    restart_required: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "version": self.version, "added": self.added, "drained": self.drained,
                "replaced": self.replaced, "restart_required": self.restart_required, "error": self.error}


@dataclass
class ConfigState:
    """The configuration in force, as ``/health`` shows it."""

    path: str | None
    version: str
    loaded_at: str = field(default_factory=lambda: _wall_now())
    restart_required: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "version": self.version, "loaded_at": self.loaded_at,
                "restart_required": self.restart_required}


def _wall_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def keep_restart_only(running: GatewayConfig, new: GatewayConfig, *,
                      source: str) -> tuple[GatewayConfig, list[str]]:
    """``new`` with the running values of the :data:`RESTART_ONLY` settings it changes, checked again as a whole
    (tier names against the tier table kept), and the names of those settings."""
    changed: list[str] = []
    top: dict[str, Any] = {}
    for section, fields in RESTART_ONLY.items():
        if section not in GatewayConfig.model_fields:
            continue
        old_value, new_value = getattr(running, section), getattr(new, section)
        if not fields:
            if old_value != new_value:
                top[section] = old_value
                changed.append(section)
            continue
        kept = {name: getattr(old_value, name) for name in fields if getattr(old_value, name) !=
                getattr(new_value, name)}
        if kept:
            top[section] = new_value.model_copy(update=kept)
            changed += [f"{section}.{name}" for name in kept]
    if not top:
        return new, []
    merged = parse_config(new.model_copy(update=top).model_dump(mode="json"), source=source)
    return merged, changed


def reload_config(gateway: Gateway) -> ReloadResult:
    """Read the gateway's file again and put it in force (see the module's docstring); never raises for a bad
    file: the outcome is ``refused`` and the configuration in force stays."""
    state = gateway.config_state
    if gateway.config_path is None:
        result = ReloadResult("refused", state.version, error="the gateway was started without a configuration "
                                                              "file (nothing to re-read)")
        gateway.metrics.child(gateway.metrics.reloads, "refused").inc()
        return result
    source = str(gateway.config_path)
    try:
        loaded = load_config(gateway.config_path).model_copy(update=gateway.overrides)
        new, restart_required = keep_restart_only(gateway.config, loaded, source=source)
    except GatewayConfigError as error:
        log.error("configuration reload refused, the configuration in force (version %s) stays: %s",
                  state.version, error)
        gateway.metrics.child(gateway.metrics.reloads, "refused").inc()
        return ReloadResult("refused", state.version, error=str(error))
    if restart_required:
        log.warning("configuration reload: %s changed in %s; a restart is needed to apply (the running values "
                    "stay)", ", ".join(restart_required), source)
    version = config_version(new)
    if version == state.version:
        state.restart_required = restart_required
        gateway.metrics.child(gateway.metrics.reloads, "unchanged").inc()
        log.info("configuration reload: %s unchanged (version %s)", source, version)
        return ReloadResult("unchanged", version, restart_required=restart_required)
    result = ReloadResult("applied", version, restart_required=restart_required)
    apply_config(gateway, new, result)
    gateway.config_state = ConfigState(source, version, restart_required=restart_required)
    gateway.metrics.child(gateway.metrics.reloads, "applied").inc()
    log.warning("configuration reloaded from %s: version %s (was %s); backends added %s, drained %s, replaced %s",
                source, version, state.version, result.added or "none", result.drained or "none",
                result.replaced or "none")
    return result


def apply_config(gateway: Gateway, new: GatewayConfig, result: ReloadResult) -> None:
    """Swap ``new`` in, backends added and drained; synchronous, so one step of the event loop."""
    pool = gateway.pool
    wanted = {b.name: b for b in new.backends}
    current = {b.name: b for b in pool.backends if not b.draining}
    for name, backend in current.items():
        config = wanted.get(name)
        if config is None:
            result.drained.append(name)
            drain(gateway, backend)
        elif config != backend.config:
            result.replaced.append(name)
            drain(gateway, backend)
    for config in new.backends:
        if config.name not in current or config.name in result.replaced:
            if config.name not in current:
                result.added.append(config.name)
            add_backend(gateway, config)
    gateway.config = new
    pool.routing = new.routing
    gateway.dispatcher.configure(new.routing, new.admission)
    if new.models != gateway.config_models:
        gateway.config_models = list(new.models)
        gateway.models = list(new.models)  # empty: asked of the backends again at the next /v1/models
    gateway.dispatcher.pump()


def add_backend(gateway: Gateway, config: Any) -> Backend:
    backend = gateway.pool.add(config)
    gateway._unstarted[backend.index] = {}
    metrics = gateway.metrics
    metrics.child(metrics.backend_inflight, backend.name).set(0)
    metrics.child(metrics.backend_healthy, backend.name).set(1)
    for reason in ("chosen", "fallback", "retry"):
        metrics.child(metrics.routed, backend.name, gateway.dispatcher.router_name, reason)
    if gateway.started:  # its first check now, not a health interval later
        task = asyncio.ensure_future(gateway.pool.check(backend))
        gateway.background.add(task)
        task.add_done_callback(gateway.background.discard)
    log.info("backend %s (%s) added at index %d", backend.name, backend.url, backend.index)
    return backend


def drain(gateway: Gateway, backend: Backend) -> None:
    """``backend`` takes no new request; retired once its requests in flight have ended."""
    backend.draining = True
    log.info("backend %s (%s) draining: %d request(s) in flight finish there", backend.name, backend.url,
             len(backend.inflight))
    if not backend.inflight:
        retire(gateway, backend)


def retire(gateway: Gateway, backend: Backend) -> None:
    """A drained backend leaves for good (the dispatcher's ``on_drained``): no longer polled."""
    if backend.retired:
        return
    backend.retired = True
    if not any(b.name == backend.name for b in gateway.pool.backends if not b.draining):
        gateway.metrics.child(gateway.metrics.backend_healthy, backend.name).set(0)
    log.info("backend %s (%s) drained and removed", backend.name, backend.url)


def install_sighup(gateway: Gateway) -> bool:
    """Reload on SIGHUP (the running loop's signal handler; only from the main thread). True when installed."""
    import signal

    if not hasattr(signal, "SIGHUP"):
        return False
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_config, gateway)
    except (RuntimeError, ValueError):  # not the main thread
        return False
    return True


def remove_sighup() -> None:
    import signal

    if hasattr(signal, "SIGHUP"):
        with contextlib.suppress(RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

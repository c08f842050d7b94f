"""Configuration of the vLLM adapter: which policy, from one environment variable or one file.

vLLM builds the scheduler itself (``--scheduler-cls semsched.vllm.Scheduler``), so the adapter reads its
configuration from the engine process's environment, validated when the engine starts:

* ``SEMSCHED_POLICY``: a policy spec, exactly as on semsched's command line (``priority-preempt``,
  ``edf:deadline=ttft;preempt=true``, ...); or
* ``SEMSCHED_CONFIG``: the path of a YAML or JSON file with the keys

  - ``policy`` (required): the policy spec;
  - ``metrics_port`` (optional): serve the adapter's Prometheus metrics on this port of 127.0.0.1 from the
    engine process (vLLM's own ``/metrics`` shows them too when ``PROMETHEUS_MULTIPROC_DIR`` is set);
  - ``metrics_host`` (optional, default ``127.0.0.1``).

Set at most one of them. With neither, the policy is ``fcfs`` (vLLM's default order). Any error names the
variable or the file, the key and the allowed values.

A policy of your own (a :class:`~semsched.core.policy.Policy` subclass registered with ``@register_policy``)
needs its module imported in the engine process before the spec is resolved: name it in
``SEMSCHED_POLICY_MODULES`` (comma-separated module names, e.g. ``mypkg.policies``), imported first by every check.

When is it checked? vLLM resolves ``--scheduler-cls`` only once the engine has loaded the weights and sized the KV
cache, so the scheduler's own check comes late. :func:`check_config` is the early one: semsched registers it as
a vLLM general plug-in (entry point group ``vllm.general_plugins``), which vLLM runs while it parses the server's
arguments and again first thing in each engine process, before anything is allocated; a bad configuration then
stops the server with one line.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from semsched.core.errors import SemschedError
from semsched.core.policy import Policy
from semsched.policies import PolicyError, make_policy

POLICY_ENV = "SEMSCHED_POLICY"
CONFIG_ENV = "SEMSCHED_CONFIG"
MODULES_ENV = "SEMSCHED_POLICY_MODULES"
DEFAULT_POLICY = "fcfs"
_FILE_KEYS = frozenset({"policy", "metrics_port", "metrics_host"})


class AdapterConfigError(SemschedError):
    """The adapter's configuration is invalid; the message names the variable or file and the key."""


@dataclass(frozen=True)
class AdapterConfig:
    policy_spec: str = DEFAULT_POLICY
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    source: str = "default"

    def make_policy(self) -> Policy:
        try:
            return make_policy(self.policy_spec)
        except (PolicyError, ValueError, TypeError) as error:
            raise AdapterConfigError(f"{self.source}: policy {self.policy_spec!r}: {error}") from None


def load_adapter_config(environ: Mapping[str, str] | None = None) -> AdapterConfig:
    """Read and validate the configuration (including building the policy once, to fail early)."""
    env = os.environ if environ is None else environ
    import_policy_modules(env)
    spec, path = env.get(POLICY_ENV, "").strip(), env.get(CONFIG_ENV, "").strip()
    if spec and path:
        raise AdapterConfigError(f"set {POLICY_ENV} or {CONFIG_ENV}, not both")
    if spec:
        config = AdapterConfig(policy_spec=spec, source=POLICY_ENV)
    elif path:
        config = _from_file(Path(path))
    else:
        config = AdapterConfig()
    config.make_policy()
    return config


def import_policy_modules(environ: Mapping[str, str] | None = None) -> list[str]:
    """Import the modules named in ``SEMSCHED_POLICY_MODULES`` (their ``@register_policy`` classes then resolve).

    Returns the names imported; a name that is empty or cannot be imported is an :class:`AdapterConfigError`
    naming the variable, the module and the import error.
    """
    env = os.environ if environ is None else environ
    raw = env.get(MODULES_ENV, "").strip()
    if not raw:
        return []
    names = [name.strip() for name in raw.split(",")]
    for name in names:
        if not name:
            raise AdapterConfigError(f"{MODULES_ENV}={raw!r}: an empty module name (separate names with ',')")
        try:
            importlib.import_module(name)
        except Exception as error:  # any failure while importing a user's module is a configuration error
            raise AdapterConfigError(
                f"{MODULES_ENV}: cannot import {name!r}: {type(error).__name__}: {error}") from None
    return names


def describe_policy(policy: Policy) -> str:
    """The policy as a spec with every parameter, e.g. ``priority-preempt:exclusive=false;mode=recompute``."""
    params = ";".join(f"{item.name}={_spec_value(getattr(policy.config, item.name))}"
                      for item in dataclasses.fields(policy.config))
    return f"{policy.name}:{params}" if params else policy.name


def _spec_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_config(environ: Mapping[str, str] | None = None) -> None:
    """Validate the adapter's configuration if any is set, and stop the process with one line if it is bad.

    The vLLM general plug-in entry point: vLLM calls it while it parses the server's arguments and at the start
    of each engine process, long before it resolves ``--scheduler-cls`` (after loading weights). It does
    nothing when none of the variables is set (vLLM loads general plug-ins in every process, whatever the
    scheduler).
    """
    env = os.environ if environ is None else environ
    if not any(env.get(name, "").strip() for name in (POLICY_ENV, CONFIG_ENV, MODULES_ENV)):
        return
    try:
        load_adapter_config(env)
    except AdapterConfigError as error:
        raise SystemExit(f"semsched: {error}") from None


def _from_file(path: Path) -> AdapterConfig:
    origin = f"{CONFIG_ENV}={path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise AdapterConfigError(f"{origin}: cannot read the file ({error.strerror})") from None
    try:
        data: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise AdapterConfigError(f"{origin}: not valid {path.suffix.lstrip('.') or 'YAML'}: {error}") from None
    if not isinstance(data, dict):
        raise AdapterConfigError(f"{origin}: must be a mapping with a 'policy' key")
    unknown = set(data) - _FILE_KEYS
    if unknown:
        raise AdapterConfigError(f"{origin}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_FILE_KEYS)}")
    spec = data.get("policy")
    if not isinstance(spec, str) or not spec.strip():
        raise AdapterConfigError(f"{origin}: policy: must be a non-empty policy spec string (got {spec!r})")
    port = data.get("metrics_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise AdapterConfigError(f"{origin}: metrics_port: must be an integer from 1 to 65535 (got {port!r})")
    host = data.get("metrics_host", "127.0.0.1")
    if not isinstance(host, str) or not host:
        raise AdapterConfigError(f"{origin}: metrics_host: must be a non-empty string (got {host!r})")
    return AdapterConfig(policy_spec=spec.strip(), metrics_port=port, metrics_host=host, source=origin)

"""Named latency profiles: YAML/JSON files that describe an analytic or batch model.

A profile file holds::

    kind: analytic            # or: batch
    name: a100-qwen1.5-7b
    description: free text
    source: where the numbers come from
    coefficients:
      alpha1: 5.135e-7        # fields of AnalyticConfig or BatchConfig, all >= 0
      ...

Packaged profiles live in ``semsched/latency/profiles/<name>.yaml``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from semsched.latency.analytic import AnalyticConfig, AnalyticLatencyModel
from semsched.latency.base import LatencyModel
from semsched.latency.batch import BatchConfig, BatchLatencyModel

_PROFILE_PACKAGE = "semsched.latency"
_PROFILE_DIR = "profiles"
_PATH_SUFFIXES = (".yaml", ".yml", ".json")
_TOP_LEVEL_FIELDS = frozenset({"kind", "name", "description", "source", "coefficients"})
_REQUIRED_TOP_LEVEL = ("kind", "name", "coefficients")


class ProfileError(ValueError):
    """A profile cannot be found, read or validated; the message names the file and the offending field."""


@dataclass(frozen=True, slots=True)
class _Kind:
    """How one ``kind`` of profile maps to a config dataclass and a model."""

    config_type: type[AnalyticConfig] | type[BatchConfig]
    build: Callable[[Any, str], LatencyModel]


def _build_analytic(config: Any, name: str) -> LatencyModel:
    return AnalyticLatencyModel(config=config, name=name)


def _build_batch(config: Any, name: str) -> LatencyModel:
    return BatchLatencyModel(config=config, name=name)


_KINDS: Mapping[str, _Kind] = {
    "analytic": _Kind(AnalyticConfig, _build_analytic),
    "batch": _Kind(BatchConfig, _build_batch),
}


def list_profiles() -> list[str]:
    """Names of the packaged profiles, sorted."""
    directory = resources.files(_PROFILE_PACKAGE).joinpath(_PROFILE_DIR)
    names = (entry.name.removesuffix(".yaml") for entry in directory.iterdir() if entry.name.endswith(".yaml"))
    return sorted(names)


def load_profile(name_or_path: str) -> LatencyModel:
    """Build the model of a profile: a packaged profile by name, else a ``.yaml``/``.yml``/``.json`` path.

    Raises :class:`ProfileError` for an unknown name (listing the known ones), a missing file, an unknown or
    missing field, a non-numeric or negative coefficient, or an unknown ``kind``.
    """
    known = list_profiles()
    if name_or_path in known:
        resource = resources.files(_PROFILE_PACKAGE).joinpath(_PROFILE_DIR, f"{name_or_path}.yaml")
        text = resource.read_text(encoding="utf-8")
        return profile_from_dict(_parse(text, ".yaml", name_or_path), name_or_path)
    if not _looks_like_path(name_or_path):
        raise ProfileError(f"unknown latency profile {name_or_path!r}; known profiles: {', '.join(known)}")
    path = Path(name_or_path)
    if not path.is_file():
        raise ProfileError(f"latency profile file not found: {path}")
    text = path.read_text(encoding="utf-8")
    return profile_from_dict(_parse(text, path.suffix.lower(), str(path)), str(path))


def profile_from_dict(data: object, origin: str = "<dict>") -> LatencyModel:
    """Validate a parsed profile and build its model; ``origin`` names the source in error messages."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile must be a mapping, got {type(data).__name__}")
    _check_top_level(data, origin)
    kind = data["kind"]
    if kind not in _KINDS:
        raise ProfileError(f"{origin}: unknown kind {kind!r}; expected one of {', '.join(_KINDS)}")
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{origin}: field 'name' must be a non-empty string, got {name!r}")
    spec = _KINDS[kind]
    coefficients = _read_coefficients(data["coefficients"], spec.config_type, origin)
    return spec.build(spec.config_type(**coefficients), name)


def save_profile(model: LatencyModel, path: str | Path, *, description: str = "", source: str = "") -> None:
    """Write ``model`` as a profile file (JSON if ``path`` ends in ``.json``, else YAML).

    Only :class:`AnalyticLatencyModel` and :class:`BatchLatencyModel` can be saved; coefficients must be
    non-negative so that the file loads again.
    """
    data = profile_to_dict(model, description=description, source=source)
    profile_from_dict(data, str(path))
    target = Path(path)
    if target.suffix.lower() == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False)
    target.write_text(text, encoding="utf-8")


def profile_to_dict(model: LatencyModel, *, description: str = "", source: str = "") -> dict[str, Any]:
    """The profile mapping that :func:`profile_from_dict` turns back into ``model``."""
    if isinstance(model, AnalyticLatencyModel):
        kind, coefficients = "analytic", asdict(model.config)
    elif isinstance(model, BatchLatencyModel):
        kind, coefficients = "batch", asdict(model.config)
    else:
        raise ProfileError(f"cannot save {type(model).__name__} as a profile: only analytic and batch models")
    return {
        "kind": kind,
        "name": model.name,
        "description": description,
        "source": source,
        "coefficients": coefficients,
    }


def _looks_like_path(name_or_path: str) -> bool:
    return name_or_path.lower().endswith(_PATH_SUFFIXES) or "/" in name_or_path or "\\" in name_or_path


def _parse(text: str, suffix: str, origin: str) -> object:
    try:
        if suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ProfileError(f"{origin}: cannot parse profile: {error}") from error


def _check_top_level(data: dict[Any, Any], origin: str) -> None:
    unknown = sorted(str(key) for key in data if key not in _TOP_LEVEL_FIELDS)
    if unknown:
        allowed = sorted(_TOP_LEVEL_FIELDS)
        raise ProfileError(f"{origin}: unknown field {unknown[0]!r}; allowed fields: {allowed}")
    for field_name in _REQUIRED_TOP_LEVEL:
        if field_name not in data:
            raise ProfileError(f"{origin}: missing field {field_name!r}")
    for field_name in ("description", "source"):
        if not isinstance(data.get(field_name, ""), str):
            raise ProfileError(f"{origin}: field {field_name!r} must be a string")


def _read_coefficients(
    raw: object, config_type: type[AnalyticConfig] | type[BatchConfig], origin: str
) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{origin}: field 'coefficients' must be a mapping, got {type(raw).__name__}")
    all_fields = [f.name for f in fields(config_type)]
    required = [f.name for f in fields(config_type) if f.default is MISSING]
    unknown = sorted(str(key) for key in raw if key not in all_fields)
    if unknown:
        raise ProfileError(f"{origin}: unknown coefficient {unknown[0]!r}; expected fields: {all_fields}")
    missing = [name for name in required if name not in raw]
    if missing:
        raise ProfileError(f"{origin}: missing coefficient {missing[0]!r}")
    return {key: _coefficient(key, value, origin) for key, value in raw.items()}


def _coefficient(field_name: str, value: object, origin: str) -> float:
    """A finite non-negative float; numeric strings such as ``"1e-9"`` (YAML 1.1 reads those as text) pass."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ProfileError(f"{origin}: coefficient {field_name!r} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ProfileError(f"{origin}: coefficient {field_name!r} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ProfileError(f"{origin}: coefficient {field_name!r} must be finite and >= 0, got {value!r}")
    return number

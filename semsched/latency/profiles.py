"""Named latency profiles: YAML/JSON files that describe an analytic or batch model.

A profile file holds::

    kind: analytic            # or: batch
    name: a100-qwen1.5-7b
    description: free text
    source: where the numbers come from
    coefficients:
      alpha1: 5.135e-7        # fields of AnalyticConfig or BatchConfig, all >= 0
      ...
    engine:                   # optional: the engine a measured profile came from (ProfiledEngine)
      engine: vllm
      block_size: 32
      ...
    fit:                      # optional: how well the model fits its measurements (numbers or text)
      mape: 0.081
      ...
    overheads:                # optional: engine time outside steps
      arrival_s: 0.0006       # per accepted request, before the next step (request intake)
      new_shape_s: 0.003      # on top of the first step of each batch size (scheduled tokens) an engine runs
      idle_wakeup_s: 0.002    # per arrival that finds the engine idle, before its step (cold caches)

Names are looked up in two places:

* **packaged** profiles: ``semsched/latency/profiles/<name>.yaml``;
* **user** profiles: ``<user dir>/<name>.yaml``, where the user dir is ``$SEMSCHED_PROFILE_DIR`` if set, else
  ``$XDG_DATA_HOME/semsched/profiles``, else ``~/.local/share/semsched/profiles`` (``semsched profile`` writes
  there). A user profile's ``name`` field must equal its file name.

Packaged names are reserved: a user file that reuses one is an error when that name is loaded (it never
silently shadows the packaged profile, nor is silently ignored), and :func:`user_profile_path` refuses it.
Anything that ends in ``.yaml``/``.yml``/``.json`` or contains a path separator is read as a file path.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from semsched.core.errors import SemschedError
from semsched.latency.analytic import AnalyticConfig, AnalyticLatencyModel
from semsched.latency.base import LatencyModel
from semsched.latency.batch import BatchConfig, BatchLatencyModel

PROFILE_DIR_ENV = "SEMSCHED_PROFILE_DIR"
"""Environment variable that overrides the user profile directory."""

_PROFILE_PACKAGE = "semsched.latency"
_PROFILE_DIR = "profiles"
_PATH_SUFFIXES = (".yaml", ".yml", ".json")
_TOP_LEVEL_FIELDS = frozenset(
    {"kind", "name", "description", "source", "coefficients", "engine", "fit", "overheads"}
)
_REQUIRED_TOP_LEVEL = ("kind", "name", "coefficients")
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

FitValue = int | float | str | bool
"""A value of a profile's ``fit`` section: a number or a short text."""

MAX_SECONDS = 3600.0
"""The largest coefficient (seconds per token, per token², or per step) or overhead (seconds) a profile may give:
an hour. No engine step, request intake or per-token cost comes near it; a larger number is a typo, and one near
the float limit (``1e308``) would overflow simulated time."""

MAX_ENGINE_INT = 2**31 - 1
"""The largest integer in a profile's ``engine`` section (vLLM counts tokens and blocks in 32-bit integers)."""


class ProfileError(SemschedError):
    """A profile cannot be found, read or validated; the message names the file and the offending field."""


@dataclass(frozen=True, slots=True)
class EngineOverheads:
    """Engine time outside the batch latency model: a profile's ``overheads`` section (each field 0 when absent).

    The simulator (:class:`~semsched.sim.engine.Instance`) charges ``arrival_s`` per accepted request before the
    next step (the engine's request intake), ``new_shape_s`` on top of the first step of each batch size
    (scheduled tokens) an engine runs (vLLM's CPU backend builds a oneDNN matmul per size), and
    ``idle_wakeup_s`` per arrival that finds the engine with nothing to do, before its step: an engine loop that
    slept meets cold caches (on this CPU a request arriving after 20 ms or more of idleness took 1.4-1.7 ms more
    from arrival to its first token than one arriving at a busy loop: ``benchmarks/idle_wakeup.py``).
    """

    arrival_s: float = 0.0
    new_shape_s: float = 0.0
    idle_wakeup_s: float = 0.0

    def __post_init__(self) -> None:
        for spec in fields(self):
            object.__setattr__(self, spec.name, _seconds(f"overheads.{spec.name}", getattr(self, spec.name)))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(spec.name for spec in fields(cls))


@dataclass(frozen=True, slots=True)
class ProfiledEngine:
    """The engine a measured profile was taken on: what a simulator needs to replay the same engine.

    ``num_gpu_blocks`` is the KV cache the engine had while it was measured (``block_size`` tokens each, as the
    engine counts them: vLLM keeps one of them as its null block); ``max_num_batched_tokens`` is its per-step
    token budget and ``max_num_seqs`` its sequence cap.
    """

    engine: str
    engine_version: str
    model: str
    device: str
    dtype: str
    block_size: int
    num_gpu_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.type in ("int", int):
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ENGINE_INT:
                    raise ProfileError(
                        f"ProfiledEngine.{spec.name} must be an integer from 1 to {MAX_ENGINE_INT}, got {value!r}"
                    )
            elif not isinstance(value, str) or not value:
                raise ProfileError(f"ProfiledEngine.{spec.name} must be a non-empty string, got {value!r}")


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    """A loaded profile: its model plus everything else the file says. ``origin`` is where it was read."""

    model: LatencyModel
    origin: str
    description: str = ""
    source: str = ""
    engine: ProfiledEngine | None = None
    fit: Mapping[str, FitValue] = field(default_factory=dict)
    #: engine time outside steps (the ``overheads`` section; every field 0 when absent)
    overheads: EngineOverheads = field(default_factory=EngineOverheads)


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


# ---- where profiles live ------------------------------------------------------------------------------------
def user_profile_dir() -> Path:
    """``$SEMSCHED_PROFILE_DIR``, else ``$XDG_DATA_HOME/semsched/profiles``, else
    ``~/.local/share/semsched/profiles``. The directory need not exist."""
    override = os.environ.get(PROFILE_DIR_ENV, "")
    if override:
        return Path(override).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home).expanduser() if data_home else Path.home() / ".local" / "share"
    return base / "semsched" / "profiles"


def packaged_profiles() -> list[str]:
    """Names of the profiles shipped with semsched, sorted."""
    directory = resources.files(_PROFILE_PACKAGE).joinpath(_PROFILE_DIR)
    names = (entry.name.removesuffix(".yaml") for entry in directory.iterdir() if entry.name.endswith(".yaml"))
    return sorted(names)


def user_profiles() -> dict[str, Path]:
    """User profiles by name (``<user dir>/<name>.yaml``); empty if the directory does not exist."""
    directory = user_profile_dir()
    if not directory.is_dir():
        return {}
    return {path.stem: path for path in sorted(directory.glob("*.yaml")) if path.is_file()}


def list_profiles() -> list[str]:
    """Names of all profiles that :func:`load_profile` finds by name (packaged and user), sorted."""
    return sorted(set(packaged_profiles()) | set(user_profiles()))


def check_profile_name(name: str) -> str:
    """Return ``name`` if it can name a profile, else raise :class:`ProfileError` saying why.

    A name is 1-100 characters of letters, digits, ``.``, ``_`` and ``-``, starts with a letter or digit, and
    does not end in a file suffix (``load_profile`` would read it as a path).
    """
    if not _NAME_PATTERN.fullmatch(name):
        raise ProfileError(
            f"profile name {name!r}: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name.lower().endswith(_PATH_SUFFIXES):
        raise ProfileError(f"profile name {name!r}: must not end in {', '.join(_PATH_SUFFIXES)} (that is a path)")
    return name


def user_profile_path(name: str) -> Path:
    """Where the user profile ``name`` lives (``<user dir>/<name>.yaml``); packaged names are refused."""
    check_profile_name(name)
    if name in packaged_profiles():
        raise ProfileError(f"profile name {name!r} is a packaged profile; choose another name")
    directory = user_profile_dir()
    if directory.exists() and not directory.is_dir():
        raise ProfileError(f"user profile directory {directory} is not a directory (check ${PROFILE_DIR_ENV})")
    return directory / f"{name}.yaml"


# ---- loading ------------------------------------------------------------------------------------------------
def load_profile(name_or_path: str) -> LatencyModel:
    """Build the model of a profile: a packaged or user profile by name, else a ``.yaml``/``.yml``/``.json`` path.

    Raises :class:`ProfileError` for an unknown name (listing the known ones), a missing file, a user profile
    that reuses a packaged name, an unknown or missing field, a non-numeric or negative coefficient, or an
    unknown ``kind``.
    """
    return load_profile_info(name_or_path).model


def load_profile_info(name_or_path: str) -> ProfileInfo:
    """Like :func:`load_profile`, with the description, source, engine and fit sections of the file."""
    packaged = packaged_profiles()
    if name_or_path in packaged:
        return _load_packaged(name_or_path)
    if _looks_like_path(name_or_path) or Path(name_or_path).is_dir():
        path = Path(name_or_path)
        if path.is_dir():
            raise ProfileError(
                f"latency profile {path} is a directory; give a profile file ({', '.join(_PATH_SUFFIXES)}) or a "
                "profile name (`semsched profiles` lists them)"
            )
        if not path.is_file():
            raise ProfileError(f"latency profile file not found: {path}")
        return _load_file(path)
    user = user_profiles()
    if name_or_path in user:
        info = _load_file(user[name_or_path])
        if info.model.name != name_or_path:
            raise ProfileError(
                f"{user[name_or_path]}: field 'name' is {info.model.name!r} but the file is named "
                f"{name_or_path!r}.yaml; user profiles are loaded by file name, so the two must match"
            )
        return info
    known = ", ".join(sorted(set(packaged) | set(user)))
    raise ProfileError(
        f"unknown latency profile {name_or_path!r}; known profiles: {known} "
        f"(user profiles are read from {user_profile_dir()}; set ${PROFILE_DIR_ENV} to change)"
    )


def profile_from_dict(data: object, origin: str = "<dict>") -> LatencyModel:
    """Validate a parsed profile and build its model; ``origin`` names the source in error messages."""
    return profile_info_from_dict(data, origin).model


def profile_info_from_dict(data: object, origin: str = "<dict>") -> ProfileInfo:
    """Validate a parsed profile and return its model with the file's other sections."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile must be a mapping, got {type(data).__name__}")
    _check_top_level(data, origin)
    kind = data["kind"]
    if not isinstance(kind, str):
        raise ProfileError(f"{origin}: field 'kind' must be one name of {', '.join(_KINDS)}, got {kind!r}")
    if kind not in _KINDS:
        raise ProfileError(f"{origin}: unknown kind {kind!r}; expected one of {', '.join(_KINDS)}")
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{origin}: field 'name' must be a non-empty string, got {name!r}")
    spec = _KINDS[kind]
    coefficients = _read_coefficients(data["coefficients"], spec.config_type, origin)
    overheads = _read_overheads(data.get("overheads"), origin)
    return ProfileInfo(
        model=spec.build(spec.config_type(**coefficients), name),
        origin=origin,
        description=data.get("description", ""),
        source=data.get("source", ""),
        engine=_read_engine(data["engine"], origin) if data.get("engine") is not None else None,
        fit=_read_fit(data["fit"], origin) if data.get("fit") is not None else {},
        overheads=overheads,
    )


# ---- saving -------------------------------------------------------------------------------------------------
def save_profile(
    model: LatencyModel,
    path: str | Path,
    *,
    description: str = "",
    source: str = "",
    engine: ProfiledEngine | None = None,
    fit: Mapping[str, FitValue] | None = None,
    overheads: Mapping[str, float] | None = None,
) -> None:
    """Write ``model`` as a profile file (JSON if ``path`` ends in ``.json``, else YAML).

    Only :class:`AnalyticLatencyModel` and :class:`BatchLatencyModel` can be saved; coefficients must be
    non-negative so that the file loads again (it is validated before anything is written). Missing parent
    directories are created; the file is replaced in one step, so a reader never sees half of it.
    """
    data = profile_to_dict(
        model,
        description=description,
        source=source,
        engine=engine,
        fit=fit,
        overheads=overheads,
    )
    target = Path(path)
    profile_from_dict(data, str(target))
    if target.suffix.lower() == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)


def profile_to_dict(
    model: LatencyModel,
    *,
    description: str = "",
    source: str = "",
    engine: ProfiledEngine | None = None,
    fit: Mapping[str, FitValue] | None = None,
    overheads: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The profile mapping that :func:`profile_from_dict` turns back into ``model``; ``engine``, ``fit`` and
    ``overheads`` (the fields of :class:`EngineOverheads` that were measured, by name) are written only when
    given."""
    if isinstance(model, AnalyticLatencyModel):
        kind, coefficients = "analytic", asdict(model.config)
    elif isinstance(model, BatchLatencyModel):
        kind, coefficients = "batch", asdict(model.config)
    else:
        raise ProfileError(f"cannot save {type(model).__name__} as a profile: only analytic and batch models")
    data: dict[str, Any] = {
        "kind": kind,
        "name": model.name,
        "description": description,
        "source": source,
        "coefficients": coefficients,
    }
    if engine is not None:
        data["engine"] = asdict(engine)
    if fit is not None:
        data["fit"] = dict(fit)
    if overheads:
        _overheads_from(dict(overheads))  # unknown names and bad values fail here, before anything is written
        data["overheads"] = {key: float(value) for key, value in overheads.items()}
    return data


# ---- helpers ------------------------------------------------------------------------------------------------
def _read_overheads(data: object, origin: str) -> EngineOverheads:
    """The ``overheads`` section (each field 0 when absent, as is the whole section)."""
    if data is None:
        return EngineOverheads()
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: 'overheads' must be a mapping, got {type(data).__name__}")
    try:
        return _overheads_from(data)
    except ProfileError as error:
        raise ProfileError(f"{origin}: {error}") from None


def _overheads_from(data: dict[Any, Any]) -> EngineOverheads:
    known = EngineOverheads.field_names()
    unknown = sorted(str(key) for key in data if key not in known)
    if unknown:
        raise ProfileError(f"unknown field(s) in 'overheads': {', '.join(unknown)} (known: {', '.join(known)})")
    return EngineOverheads(**data)


def _load_packaged(name: str) -> ProfileInfo:
    shadow = user_profiles().get(name)
    if shadow is not None:
        raise ProfileError(
            f"user profile {shadow} reuses the packaged profile name {name!r}; packaged names are reserved: "
            "rename that file (and its 'name' field) or delete it"
        )
    resource = resources.files(_PROFILE_PACKAGE).joinpath(_PROFILE_DIR, f"{name}.yaml")
    text = resource.read_text(encoding="utf-8")
    return profile_info_from_dict(_parse(text, ".yaml", name), name)


def _load_file(path: Path) -> ProfileInfo:
    text = path.read_text(encoding="utf-8")
    return profile_info_from_dict(_parse(text, path.suffix.lower(), str(path)), str(path))


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
    return {key: _seconds(f"{origin}: coefficient {key!r}", value) for key, value in raw.items()}


def _seconds(what: str, value: object) -> float:
    """``value`` as a float from 0 to :data:`MAX_SECONDS`, else :class:`ProfileError` naming ``what`` and the
    limit. Numeric strings such as ``"1e-9"`` (YAML 1.1 reads those as text) pass; NaN, infinities and
    booleans do not."""
    shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:24]}... ({len(repr(value))} characters)"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ProfileError(f"{what} must be a number, got {shown}")
    try:
        number = float(value)
    except ValueError:
        raise ProfileError(f"{what} must be a number, got {shown}") from None
    except OverflowError:  # an integer beyond the float range
        number = math.inf
    if not 0 <= number <= MAX_SECONDS:
        raise ProfileError(f"{what} must be a number from 0 to {MAX_SECONDS:g}, got {shown}")
    return number


def _read_engine(raw: object, origin: str) -> ProfiledEngine:
    if not isinstance(raw, dict):
        raise ProfileError(f"{origin}: field 'engine' must be a mapping, got {type(raw).__name__}")
    all_fields = [f.name for f in fields(ProfiledEngine)]
    unknown = sorted(str(key) for key in raw if key not in all_fields)
    if unknown:
        raise ProfileError(f"{origin}: unknown engine field {unknown[0]!r}; expected fields: {all_fields}")
    missing = [name for name in all_fields if name not in raw]
    if missing:
        raise ProfileError(f"{origin}: missing engine field {missing[0]!r}")
    try:
        return ProfiledEngine(**raw)
    except ProfileError as error:
        raise ProfileError(f"{origin}: engine: {error}") from None


def _read_fit(raw: object, origin: str) -> dict[str, FitValue]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{origin}: field 'fit' must be a mapping, got {type(raw).__name__}")
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, int | float | str | bool):
            raise ProfileError(f"{origin}: fit entry {key!r} must map a name to a number or text, got {value!r}")
    return dict(raw)

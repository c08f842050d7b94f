"""Tests for semsched/latency/profiles.py and the packaged profile files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from semsched.latency.analytic import AnalyticConfig, AnalyticLatencyModel
from semsched.latency.base import LatencyModel
from semsched.latency.batch import BatchConfig, BatchLatencyModel
from semsched.latency.derive_profiles import derive_batch_profile
from semsched.latency.profiles import (
    ProfileError,
    list_profiles,
    load_profile,
    profile_from_dict,
    save_profile,
)

# Appendix B as printed ("decoding coefficients" = gamma1, gamma2; "prefill coefficients" = alpha1, alpha2;
# "cache loading and saving speeds" = beta), with the 4B prefill slip 1.466e-2 corrected to 1.4658e-9.
APPENDIX_B = {
    "a100-qwen1.5-4b": AnalyticConfig(
        alpha1=1.4658e-9, alpha2=1.052e-4, gamma1=5.913e-9, gamma2=1.196e-2, beta=1e-4
    ),
    "a100-qwen1.5-7b": AnalyticConfig(
        alpha1=5.135e-7, alpha2=1.481e-4, gamma1=1.349e-8, gamma2=1.330e-2, beta=1e-4
    ),
    "a5000-qwen1.5-7b": AnalyticConfig(
        alpha1=1.859e-9, alpha2=2.175e-4, gamma1=2.117e-6, gamma2=2.727e-2, beta=3e-4
    ),
}


def analytic_dict(**coefficient_overrides: Any) -> dict[str, Any]:
    coefficients: dict[str, Any] = {
        "alpha1": 1e-9,
        "alpha2": 1e-4,
        "gamma1": 1e-8,
        "gamma2": 1e-2,
        "beta": 1e-4,
    }
    coefficients.update(coefficient_overrides)
    return {"kind": "analytic", "name": "t", "description": "", "source": "", "coefficients": coefficients}


@pytest.mark.parametrize("name", sorted(APPENDIX_B))
def test_appendix_b_profiles_load_as_printed(name: str) -> None:
    model = load_profile(name)
    assert isinstance(model, AnalyticLatencyModel)
    assert model.name == name
    assert model.config == APPENDIX_B[name]


def test_list_profiles_and_every_profile_loads_under_its_file_name() -> None:
    names = list_profiles()
    assert set(APPENDIX_B) | {"a100-qwen1.5-7b-batch"} <= set(names)
    for name in names:
        model = load_profile(name)
        assert model.name == name
        assert isinstance(model, LatencyModel)


def test_packaged_batch_profile_is_reproducible() -> None:
    derived, report = derive_batch_profile()
    packaged = load_profile("a100-qwen1.5-7b-batch")
    assert isinstance(packaged, BatchLatencyModel)
    for name in ("t_c", "a_p", "b_p", "c_p", "a_d", "b_d", "kv_transfer_s_per_token"):
        assert getattr(packaged.config, name) == pytest.approx(getattr(derived.config, name), rel=1e-9), name
    assert report.mape < 0.1


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_save_then_load_round_trips(tmp_path: Path, suffix: str) -> None:
    models: list[LatencyModel] = [
        AnalyticLatencyModel(config=APPENDIX_B["a100-qwen1.5-7b"], name="custom-analytic"),
        BatchLatencyModel(config=BatchConfig(1e-3, 1e-9, 2e-9, 1e-4, 1e-8, 1e-4, 5e-5), name="custom-batch"),
    ]
    for model in models:
        path = tmp_path / f"{model.name}{suffix}"
        save_profile(model, path, description="d", source="s")
        assert load_profile(str(path)) == model


def test_unknown_name_lists_known_profiles() -> None:
    with pytest.raises(ProfileError, match="a100-qwen1.5-7b"):
        load_profile("h100-nonexistent")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="not found"):
        load_profile(str(tmp_path / "absent.yaml"))


def test_yaml_file_with_bad_coefficient_names_field_and_value(tmp_path: Path) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(analytic_dict(gamma2="fast")))
    with pytest.raises(ProfileError, match=r"'gamma2'.*'fast'"):
        load_profile(str(path))


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (analytic_dict(beta=-1e-4), r"'beta'.*-0\.0001"),
        (analytic_dict(alpha1=True), r"'alpha1'.*True"),
        (analytic_dict(alpha1=float("nan")), r"'alpha1'"),
        (analytic_dict(delta=1.0), r"unknown coefficient 'delta'"),
        ({**analytic_dict(), "kind": "neural"}, r"unknown kind 'neural'"),
        ({**analytic_dict(), "colour": "red"}, r"unknown field 'colour'"),
        ({k: v for k, v in analytic_dict().items() if k != "kind"}, r"missing field 'kind'"),
        ({**analytic_dict(), "name": ""}, r"'name'"),
        ({**analytic_dict(), "coefficients": [1, 2]}, r"'coefficients' must be a mapping"),
        ([1, 2], r"must be a mapping"),
    ],
)
def test_bad_profiles_raise_profile_error(data: object, pattern: str) -> None:
    with pytest.raises(ProfileError, match=pattern):
        profile_from_dict(data)


def test_missing_coefficient_is_named() -> None:
    data = analytic_dict()
    del data["coefficients"]["gamma1"]
    with pytest.raises(ProfileError, match="missing coefficient 'gamma1'"):
        profile_from_dict(data)


def test_optional_batch_coefficient_defaults_to_free_swap() -> None:
    coefficients = {"t_c": 1e-3, "a_p": 1e-9, "b_p": 1e-9, "c_p": 1e-4, "a_d": 1e-8, "b_d": 1e-4}
    model = profile_from_dict({"kind": "batch", "name": "b", "coefficients": coefficients})
    assert model.swap_time_s(1000) == 0.0


def test_numeric_string_coefficient_is_accepted() -> None:
    # YAML 1.1 reads 1e-9 (no decimal point) as a string; accept it rather than surprise the user.
    model = profile_from_dict(
        yaml.safe_load(
            "kind: analytic\nname: s\ncoefficients: {alpha1: 1e-9, alpha2: 0, gamma1: 0, gamma2: 0, beta: 0}"
        )
    )
    assert isinstance(model, AnalyticLatencyModel)
    assert model.config.alpha1 == 1e-9


def test_saving_negative_coefficients_is_refused(tmp_path: Path) -> None:
    model = BatchLatencyModel(config=BatchConfig(-1e-3, 0.0, 0.0, 0.0, 0.0, 0.0), name="neg")
    with pytest.raises(ProfileError, match="'t_c'"):
        save_profile(model, tmp_path / "neg.yaml")
    assert not (tmp_path / "neg.yaml").exists()

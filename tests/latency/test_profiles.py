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
    PROFILE_DIR_ENV,
    EngineOverheads,
    FitValue,
    ProfiledEngine,
    ProfileError,
    check_profile_name,
    list_profiles,
    load_profile,
    load_profile_info,
    packaged_profiles,
    profile_from_dict,
    profile_info_from_dict,
    profile_to_dict,
    save_profile,
    user_profile_dir,
    user_profile_path,
    user_profiles,
)

# Appendix B as printed ("decoding coefficients" = gamma1, gamma2; "prefill coefficients" = alpha1, alpha2;
# "cache loading and saving speeds" = beta), with the prefill slips corrected: 4B 1.466e-2 -> 1.4658e-9, 7B
# 5.135e-7 -> 5.135e-9 (a100-qwen1.5-7b-as-printed keeps the printed 7B value).
APPENDIX_B = {
    "a100-qwen1.5-4b": AnalyticConfig(
        alpha1=1.4658e-9, alpha2=1.052e-4, gamma1=5.913e-9, gamma2=1.196e-2, beta=1e-4
    ),
    "a100-qwen1.5-7b": AnalyticConfig(
        alpha1=5.135e-9, alpha2=1.481e-4, gamma1=1.349e-8, gamma2=1.330e-2, beta=1e-4
    ),
    "a100-qwen1.5-7b-as-printed": AnalyticConfig(
        alpha1=5.135e-7, alpha2=1.481e-4, gamma1=1.349e-8, gamma2=1.330e-2, beta=1e-4
    ),
    "a5000-qwen1.5-7b": AnalyticConfig(
        alpha1=1.859e-9, alpha2=2.175e-4, gamma1=2.117e-6, gamma2=2.727e-2, beta=3e-4
    ),
}


ENGINE = ProfiledEngine(
    engine="vllm",
    engine_version="0.32.0",
    model="/models/tiny",
    device="cpu",
    dtype="bfloat16",
    block_size=32,
    num_gpu_blocks=1024,
    max_num_batched_tokens=512,
    max_num_seqs=16,
    max_model_len=2048,
)


@pytest.fixture(autouse=True)
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets an empty user profile directory of its own (never the developer's real one)."""
    directory = tmp_path / "user-profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(directory))
    return directory


def batch_model(name: str) -> BatchLatencyModel:
    return BatchLatencyModel(config=BatchConfig(1e-3, 1e-9, 2e-9, 1e-4, 1e-8, 1e-4), name=name)


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
        (
            {**analytic_dict(), "kind": ["analytic"]},
            r"field 'kind' must be one name of analytic, batch, got \['analytic'\]",
        ),
        ({**analytic_dict(), "kind": None}, r"field 'kind' must be one name of analytic, batch, got None"),
        ({**analytic_dict(), "kind": {"a": 1}}, r"field 'kind' must be one name of"),
        (analytic_dict(gamma2=1e308), r"coefficient 'gamma2' must be a number from 0 to 3600, got 1e\+308"),
        (analytic_dict(gamma2=3600.001), r"coefficient 'gamma2' must be a number from 0 to 3600, got 3600.001"),
        (
            analytic_dict(alpha1=10**400),
            r"coefficient 'alpha1' must be a number from 0 to 3600, got 1000.*\.\.\. ",
        ),
        (analytic_dict(alpha1=float("inf")), r"coefficient 'alpha1' must be a number from 0 to 3600, got inf"),
        (analytic_dict(alpha1="-1e-9"), r"coefficient 'alpha1' must be a number from 0 to 3600, got '-1e-9'"),
        (analytic_dict(alpha1=[1e-9]), r"coefficient 'alpha1' must be a number, got \[1e-09\]"),
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


# ---- user profiles ----------------------------------------------------------------------------------------------
def test_user_profile_dir_prefers_env_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "mine"))
    assert user_profile_dir() == tmp_path / "mine"
    monkeypatch.delenv(PROFILE_DIR_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert user_profile_dir() == tmp_path / "xdg" / "semsched" / "profiles"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_profile_dir() == tmp_path / "home" / ".local" / "share" / "semsched" / "profiles"


def test_missing_user_dir_means_only_packaged_profiles(user_dir: Path) -> None:
    assert not user_dir.exists()
    assert user_profiles() == {}
    assert list_profiles() == packaged_profiles()


def test_user_profile_loads_by_name_with_its_engine_and_fit(user_dir: Path) -> None:
    path = user_profile_path("my-cpu")
    assert path == user_dir / "my-cpu.yaml"
    save_profile(batch_model("my-cpu"), path, description="d", source="s", engine=ENGINE, fit={"mape": 0.1})
    assert user_dir.is_dir()  # created by save_profile
    assert load_profile("my-cpu") == batch_model("my-cpu")
    assert "my-cpu" in list_profiles() and set(packaged_profiles()) < set(list_profiles())
    info = load_profile_info("my-cpu")
    assert (info.engine, dict(info.fit), info.description, info.origin) == (ENGINE, {"mape": 0.1}, "d", str(path))
    assert [p.name for p in user_dir.iterdir()] == ["my-cpu.yaml"]  # no partial file left behind


def test_packaged_names_are_reserved(user_dir: Path) -> None:
    with pytest.raises(ProfileError, match="packaged profile"):
        user_profile_path("a100-qwen1.5-7b")
    # a stray user file with a packaged name is an error for that name only, never a silent shadow
    save_profile(batch_model("a100-qwen1.5-7b"), user_dir / "a100-qwen1.5-7b.yaml")
    with pytest.raises(ProfileError, match="reserved"):
        load_profile("a100-qwen1.5-7b")
    assert load_profile("a100-qwen1.5-4b").name == "a100-qwen1.5-4b"


def test_user_profile_name_must_match_its_file(user_dir: Path) -> None:
    save_profile(batch_model("something-else"), user_dir / "mine.yaml")
    with pytest.raises(ProfileError, match=r"'something-else'.*'mine'"):
        load_profile("mine")
    assert load_profile(str(user_dir / "mine.yaml")).name == "something-else"  # by path, any name goes


def test_unknown_name_says_where_user_profiles_live(user_dir: Path) -> None:
    with pytest.raises(ProfileError, match=f"{user_dir}.*{PROFILE_DIR_ENV}"):
        load_profile("no-such-profile")


@pytest.mark.parametrize(
    "name", ["", "a/b", "../up", "-dash", ".hidden", "has space", "x.yaml", "X.JSON", "n" * 101]
)
def test_bad_profile_names_are_refused(name: str) -> None:
    with pytest.raises(ProfileError, match="profile name"):
        check_profile_name(name)


def test_user_dir_that_is_a_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(PROFILE_DIR_ENV, str(blocker))
    assert user_profiles() == {}
    with pytest.raises(ProfileError, match=f"{blocker} is not a directory"):
        user_profile_path("ok")


# ---- engine and fit sections ------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_engine_and_fit_sections_round_trip(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"p{suffix}"
    fit: dict[str, FitValue] = {"mape": 0.08, "num_samples": 150, "timing": "execute", "nonnegative": True}
    save_profile(batch_model("p"), path, engine=ENGINE, fit=fit)
    info = load_profile_info(str(path))
    assert info.engine == ENGINE and dict(info.fit) == fit


def test_profiles_without_engine_or_fit_still_load() -> None:
    info = load_profile_info("a100-qwen1.5-7b-batch")
    assert info.engine is None and dict(info.fit) == {}
    assert info.overheads == EngineOverheads(0.0, 0.0, 0.0)
    assert "engine" not in profile_to_dict(info.model) and "overheads" not in profile_to_dict(info.model)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_the_overheads_round_trip(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"p{suffix}"
    measured = {"arrival_s": 6.5e-4, "new_shape_s": 2.9e-3, "idle_wakeup_s": 1.7e-3}
    save_profile(batch_model("p"), path, overheads=measured)
    info = load_profile_info(str(path))
    assert info.overheads == EngineOverheads(arrival_s=6.5e-4, new_shape_s=2.9e-3, idle_wakeup_s=1.7e-3)
    save_profile(batch_model("p"), path, overheads={"new_shape_s": 2.9e-3})  # the fields not measured read as 0
    written = profile_to_dict(batch_model("p"), overheads={"new_shape_s": 2.9e-3})
    assert written["overheads"] == {"new_shape_s": 2.9e-3}
    info = load_profile_info(str(path))
    assert info.overheads == EngineOverheads(new_shape_s=2.9e-3)


def test_saving_bad_overheads_fails_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    with pytest.raises(ValueError, match=r"unknown field\(s\) in 'overheads': per_step_s"):
        save_profile(batch_model("p"), path, overheads={"per_step_s": 1.0})
    with pytest.raises(ProfileError, match=r"overheads.idle_wakeup_s must be a number from 0 to 3600"):
        save_profile(batch_model("p"), path, overheads={"idle_wakeup_s": -1.0})
    assert not path.exists()


@pytest.mark.parametrize(
    ("overheads", "pattern"),
    [
        ({"arrival_s": -1.0}, r"overheads.arrival_s must be a number from 0 to 3600, got -1.0"),
        ({"arrival_s": "fast"}, r"overheads.arrival_s must be a number, got 'fast'"),
        ({"arrival_s": float("nan")}, r"overheads.arrival_s must be a number from 0 to 3600, got nan"),
        ({"arrival_s": 1e308}, r"overheads.arrival_s must be a number from 0 to 3600, got 1e\+308"),
        (
            {"arrival_s": 10**400},
            r"overheads.arrival_s must be a number from 0 to 3600, got 1000.*\(401 characters\)",
        ),
        ({"arrival_s": [0.001]}, r"overheads.arrival_s must be a number, got \[0.001\]"),
        ({"new_shape_s": -0.5}, r"overheads.new_shape_s must be a number from 0 to 3600, got -0.5"),
        ({"new_shape_s": True}, r"overheads.new_shape_s must be a number, got True"),
        ({"idle_wakeup_s": float("inf")}, r"overheads.idle_wakeup_s must be a number from 0 to 3600, got inf"),
        ({"idle_wakeup_s": 7200}, r"overheads.idle_wakeup_s must be a number from 0 to 3600, got 7200"),
        ({"per_step_s": 1.0}, r"unknown field\(s\) in 'overheads': per_step_s"),
        ([1.0], r"'overheads' must be a mapping"),
    ],
)
def test_bad_overheads_raise_profile_error(overheads: object, pattern: str) -> None:
    with pytest.raises(ProfileError, match=pattern):
        profile_from_dict({**profile_to_dict(batch_model("o")), "overheads": overheads})


def engine_dict(**overrides: Any) -> dict[str, Any]:
    data = {**profile_to_dict(batch_model("e"), engine=ENGINE)}
    data["engine"] = {**data["engine"], **overrides}
    return data


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (engine_dict(block_size=0), r"block_size must be an integer from 1 to 2147483647, got 0"),
        (
            engine_dict(num_gpu_blocks=2**31),
            r"num_gpu_blocks must be an integer from 1 to 2147483647, got 2147483648",
        ),
        (
            engine_dict(max_model_len=1e9),
            r"max_model_len must be an integer from 1 to 2147483647, got 1000000000.0",
        ),
        (engine_dict(num_gpu_blocks=True), r"num_gpu_blocks must be an integer"),
        (engine_dict(device=""), r"device must be a non-empty string"),
        (engine_dict(colour="red"), r"unknown engine field 'colour'"),
        ({**engine_dict(), "engine": {"engine": "vllm"}}, r"missing engine field 'engine_version'"),
        ({**engine_dict(), "engine": [1]}, r"'engine' must be a mapping"),
        ({**engine_dict(), "fit": {"nested": {"a": 1}}}, r"fit entry 'nested'"),
        ({**engine_dict(), "fit": "good"}, r"'fit' must be a mapping"),
    ],
)
def test_bad_engine_or_fit_sections_raise_profile_error(data: object, pattern: str) -> None:
    with pytest.raises(ProfileError, match=pattern):
        profile_from_dict(data)


def test_numeric_string_overheads_are_accepted_as_coefficients_are() -> None:
    text = yaml.safe_dump(profile_to_dict(batch_model("o"))) + "overheads: {arrival_s: 1e-3, new_shape_s: 2e-3}\n"
    info = profile_info_from_dict(yaml.safe_load(text), "o.yaml")
    assert info.overheads == EngineOverheads(arrival_s=1e-3, new_shape_s=2e-3)


@pytest.mark.parametrize(
    ("section", "pattern"),
    [
        ("kind: [batch]", r"bad.yaml: field 'kind' must be one name of analytic, batch, got \['batch'\]"),
        (
            "overheads: {arrival_s: 1e308}",  # YAML 1.1 reads it as text; it is parsed like a number
            r"bad.yaml: overheads.arrival_s must be a number from 0 to 3600, got '1e308'",
        ),
        (
            "overheads: {arrival_s: 1.0e+308}",
            r"bad.yaml: overheads.arrival_s must be a number from 0 to 3600, got 1e\+308",
        ),
        (
            "overheads: {arrival_s: .inf}",
            r"bad.yaml: overheads.arrival_s must be a number from 0 to 3600, got inf",
        ),
        (
            "overheads: {arrival_s: .nan}",
            r"bad.yaml: overheads.arrival_s must be a number from 0 to 3600, got nan",
        ),
        ("overheads: {arrival_s: -0.001}", r"bad.yaml: overheads.arrival_s must be a number from 0 to 3600"),
    ],
)
def test_absurd_profile_files_are_one_profile_error(tmp_path: Path, section: str, pattern: str) -> None:
    """These once gave tracebacks: an unhashable ``kind``, and overheads that overflowed simulated time."""
    data = profile_to_dict(batch_model("bad"))
    lines = [line for line in yaml.safe_dump(data).splitlines() if not line.startswith("kind:")]
    if not section.startswith("kind:"):
        lines.append("kind: batch")
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join([*lines, section]) + "\n")
    with pytest.raises(ProfileError, match=pattern):
        load_profile_info(str(path))

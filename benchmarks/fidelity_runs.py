"""Fidelity runs side by side: what each ``semsched fidelity --out DIR`` run measured, and the load it ran at.

For every output directory given (``fidelity.json`` and ``profile.yaml``, as ``semsched fidelity`` writes them) it
prints the mean errors per policy, the worst, the engine-speed probe's range against the profile's, and the load:
the replay rate over the saturation rate of the first profile part (which set the rate) and of the full profile
(the one the simulator got). Runs made before the report carried the full profile's saturation rate get it
recomputed here from their ``profile.yaml`` and the slice (the same trace head, length scale and seed). Rows are
sorted by that load, since queueing magnifies every step-time error as the load grows.

It also gives the worst mean error of the simulator on the machine's speed during each replay (the report's
"sim, machine speed" column). Runs made before the report carried it get it recomputed from their ``steps.csv``,
``requests.csv`` and ``profile.yaml`` (every batch size taken as warm, as the replays' warm-up made it).

Run: ``.venv/bin/python benchmarks/fidelity_runs.py runs/fid1 runs/fid2 ...`` (a second or two per run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from common import ResultTable, dump_json, make_console


def summarise(run: Path) -> dict[str, Any]:
    from semsched.calibrate import fidelity
    from semsched.calibrate.fidelity_analysis import PROBE_FIT_KEY
    from semsched.calibrate.profiling import EngineSettings
    from semsched.latency import load_profile_info

    for name in ("fidelity.json", "profile.yaml"):
        if not (run / name).is_file():
            raise SystemExit(f"error: {run}: no {name} (not a `semsched fidelity --out` directory?)")
    data = json.loads((run / "fidelity.json").read_text(encoding="utf-8"))
    meta = data["meta"]
    profile = load_profile_info(str(run / "profile.yaml"))
    full = meta.get("full_profile_saturation_rate_per_s")
    if full is None:
        settings = EngineSettings(model="unused", max_model_len=int(meta["engine"]["max_model_len"]))
        workload, _ = fidelity.load_slice(
            meta["trace"], int(meta["num_requests"]), max_model_len=settings.max_model_len, seed=int(meta["seed"])
        )
        full = fidelity.saturation_rate(workload, fidelity.scheduler_config(settings), profile.model)
    probe = profile.fit.get(PROBE_FIT_KEY)
    ratios = [
        float(replay[key]) / float(probe)
        for policy in data["policies"].values()
        for replay in policy.get("replays", [])
        for key in ("probe_before_s", "probe_after_s")
        if probe and replay.get(key)
    ]
    rate = float(meta["rate_per_s"])
    given = given_speed_errors(run, data, profile)
    return {
        "run": str(run),
        "repeats": int(meta["repeats"]),
        "errors": {
            policy: {name: float(policy_data["metrics"][name]["error"]) for name in ("ttft_mean", "e2e_mean")}
            for policy, policy_data in data["policies"].items()
        },
        "worst": float(data["worst_mean_error"]),
        "rate_per_s": rate,
        "load_first_part": rate / float(meta["simulated_saturation_rate_per_s"]),
        "load_full_profile": rate / float(full),
        "probe_range": [min(ratios), max(ratios)] if ratios else None,
        "given_speed_errors": given,
        "worst_given_speed": max(abs(e) for errors in given.values() for e in errors.values()) if given else None,
    }


def given_speed_errors(run: Path, data: dict[str, Any], profile: Any) -> dict[str, dict[str, float]] | None:
    """Per policy, the TTFT and E2E mean errors of the simulator on the machine's speed during each replay: as
    the run reported them, or recomputed from its files; None when the run has neither."""
    policies = data["policies"]
    if all(p.get("given_machine_speed") for p in policies.values()):
        return {
            name: {m: float(p["given_machine_speed"]["metrics"][m]["error"]) for m in ("ttft_mean", "e2e_mean")}
            for name, p in policies.items()
        }
    if not ((run / "steps.csv").is_file() and (run / "requests.csv").is_file()):
        return None
    from semsched.calibrate import fidelity
    from semsched.calibrate.fidelity_analysis import profile_timing
    from semsched.calibrate.fidelity_report import read_real_latencies, read_steps_csv
    from semsched.calibrate.profiling import EngineSettings
    from semsched.workloads import rescale_to_rate

    meta = data["meta"]
    engine = meta["engine"]
    settings = EngineSettings(
        model="unused",
        max_model_len=int(engine["max_model_len"]),
        max_num_seqs=int(engine["max_num_seqs"]),
        max_num_batched_tokens=int(engine["max_num_batched_tokens"]),
        block_size=int(engine["block_size"]),
        num_gpu_blocks=int(engine["kv_blocks"]),
    )
    workload, _ = fidelity.load_slice(
        meta["trace"], int(meta["num_requests"]), max_model_len=settings.max_model_len, seed=int(meta["seed"])
    )
    workload = rescale_to_rate(workload, float(meta["rate_per_s"]))
    steps, latencies = read_steps_csv(run / "steps.csv"), read_real_latencies(run / "requests.csv")
    errors = {}
    for name in policies:
        repeats = sorted(repeat for policy, repeat in steps if policy == name)
        given = fidelity.compare_given_speed(
            workload,
            name,
            [(steps[(name, r)], latencies[(name, r)]) for r in repeats],
            fidelity.scheduler_config(settings),
            profile,
            profile_timing(profile),
            range(1, settings.max_num_batched_tokens + 1),
        )
        errors[name] = {m: given.metric(m).error for m in ("ttft_mean", "e2e_mean")}
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("runs", nargs="+", type=Path, help="semsched fidelity --out directories")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = sorted((summarise(run) for run in args.runs), key=lambda row: row["load_full_profile"])
    policies = list(rows[0]["errors"])
    table = ResultTable(
        "semsched fidelity runs, by the load they ran at",
        ["run", "repeats", *(f"{p} {m}" for p in policies for m in ("TTFT", "E2E")), "worst",
         "load (first part)", "load (full profile)", "probe vs profile", "worst, machine speed"],
    )
    for row in rows:
        errors = [f"{row['errors'].get(p, {}).get(m, float('nan')):+.1%}" for p in policies
                  for m in ("ttft_mean", "e2e_mean")]
        probe = row["probe_range"]
        table.add(
            row["run"], str(row["repeats"]), *errors, f"{row['worst']:.1%}", f"{row['load_first_part']:.2f}",
            f"{row['load_full_profile']:.2f}", f"{probe[0]:.2f}-{probe[1]:.2f}x" if probe else "-",
            "-" if row["worst_given_speed"] is None else f"{row['worst_given_speed']:.1%}",
        )
    table.print(make_console())
    if args.json:
        dump_json(args.json, {"runs": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

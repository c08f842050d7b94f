"""Output-length distribution predictors (issue 16, seed 002) on every AlpacaEval and MT-Bench model file.

For each benchmark, each model's answer file is the stream to predict, in both modes of
:mod:`semsched.predict.lengths_eval` (``online``: each request from the file's earlier rows, no warm-up;
``cross-model``: every request from the other models' answers). Each file is loaded (and its tokens counted)
once; prompt embeddings come from the disk cache after the first run. Prints, per benchmark and mode, the
median over models of every metric per predictor, then each model's CRPS per predictor, as rich tables and
Markdown; then the embedding forward pass's cost (uncached, batch of 64 and 16 single prompts, on the
benchmark's first file) and two target lines: semantic-knn's online CRPS below every baseline's (median over
models, and how many models), and semantic-knn's batched prediction cost <= 0.5 ms per request (excluding the
embedding).

Run: ``.venv/bin/python benchmarks/lengths_eval.py`` (about 19 minutes on 2 busy cores; ``--benchmarks mt-bench``
for ~3 minutes, ``--max-files N`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from common import ResultTable, at_least, dump_json, make_console, target_line

from semsched.predict.embed import Embedder
from semsched.predict.lengths_eval import (
    DEFAULT_PREDICTORS,
    MODES,
    LengthsEvalReport,
    embedding_cost,
    evaluate_loaded,
)
from semsched.workloads.answers import answer_files, load_answer_file

BENCHMARKS = ("alpaca-eval", "mt-bench")
METRICS = ("crps", "log_loss", "bucket_accuracy", "mae_mean", "batched_ms_per_request", "single_ms_per_request")
TARGET_MS = 0.5


def run_benchmark(benchmark: str, max_files: int | None, predictors: list[str]) -> dict[str, Any]:
    paths = answer_files(benchmark)[:max_files]  # type: ignore[arg-type]
    files = [load_answer_file(path) for path in paths]
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for index, target in enumerate(files):
        others = [f for i, f in enumerate(files) if i != index]
        for mode in MODES:
            start = time.perf_counter()
            history = others if mode == "cross-model" else []
            report = evaluate_loaded(target, history, mode=mode, predictors=predictors)
            runs[mode].append(_row(report, time.perf_counter() - start))
    cost = embedding_cost(files[0].prompts, Embedder(cache=False))
    return {"benchmark": benchmark, "files": [str(p) for p in paths], "runs": runs, "embedding": cost.as_dict()}


def _row(report: LengthsEvalReport, wall_s: float) -> dict[str, Any]:
    return {"model": report.model, "requests": report.requests, "history_rows": report.history_rows,
            "wall_s": wall_s, "predictors": {k: v for k, v in report.as_dict().items() if k != "embedding"}}


def medians(rows: list[dict[str, Any]], predictor: str) -> dict[str, float]:
    return {m: statistics.median(r["predictors"][predictor][m] for r in rows) for m in METRICS}


def print_results(result: dict[str, Any], predictors: list[str], console: Any) -> list[str]:
    lines = []
    for mode, rows in result["runs"].items():
        summary = ResultTable(f"{result['benchmark']}, {mode}: median over {len(rows)} models",
                              ["predictor", "CRPS", "log-loss", "bucket acc.", "MAE of mean",
                               "ms/req batched", "ms/req single"])
        for name in predictors:
            m = medians(rows, name)
            summary.add(name, f"{m['crps']:.1f}", f"{m['log_loss']:.3f}", f"{m['bucket_accuracy']:.3f}",
                        f"{m['mae_mean']:.1f}", f"{m['batched_ms_per_request']:.3f}",
                        f"{m['single_ms_per_request']:.3f}")
        summary.print(console)
        per_model = ResultTable(f"{result['benchmark']}, {mode}: CRPS per model (tokens)",
                                ["model", "requests", *predictors])
        for row in rows:
            per_model.add(row["model"], str(row["requests"]),
                          *(f"{row['predictors'][n]['crps']:.1f}" for n in predictors))
        per_model.print(console)
        lines.extend(_targets(result["benchmark"], mode, rows, predictors))
    e = result["embedding"]
    lines.append(f"{result['benchmark']}: embedding forward pass (uncached, CPU, {os.cpu_count()} cores) "
                 f"{e['batched_ms_per_request']:.2f} ms/request in a batch of {e['batch_size']}, "
                 f"{e['single_ms_per_request']:.2f} ms/request alone")
    return lines


def _targets(benchmark: str, mode: str, rows: list[dict[str, Any]], predictors: list[str]) -> list[str]:
    lines = []
    if "semantic-knn" not in predictors:
        return lines
    baselines = [n for n in predictors if n != "semantic-knn"]
    if mode == "online" and baselines:
        knn = medians(rows, "semantic-knn")["crps"]
        best = min(baselines, key=lambda n: medians(rows, n)["crps"])
        wins = sum(all(r["predictors"]["semantic-knn"]["crps"] < r["predictors"][n]["crps"] for n in baselines)
                   for r in rows)
        lines.append(target_line(f"{benchmark} online: semantic-knn CRPS below every baseline (median)",
                                 f"{knn:.1f} vs best baseline {best} {medians(rows, best)['crps']:.1f}; "
                                 f"below all on {wins}/{len(rows)} models", "below every baseline",
                                 knn < medians(rows, best)["crps"]))
    batched = max(r["predictors"]["semantic-knn"]["batched_ms_per_request"] for r in rows)
    lines.append(target_line(f"{benchmark} {mode}: semantic-knn batched prediction (worst model)",
                             f"{batched:.3f} ms/request", f"<= {TARGET_MS} ms", batched <= TARGET_MS))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS), help="alpaca-eval, mt-bench or both")
    parser.add_argument("--predictors", default=",".join(DEFAULT_PREDICTORS), help="comma-separated specs")
    parser.add_argument("--max-files", type=at_least(2), default=None, help="first N files of each benchmark")
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args()
    console = make_console()
    predictors = [p for p in args.predictors.split(",") if p]
    results, lines = [], []
    for benchmark in args.benchmarks.split(","):
        if benchmark not in BENCHMARKS:
            parser.error(f"--benchmarks: {benchmark!r} is not one of {', '.join(BENCHMARKS)}")
        result = run_benchmark(benchmark, args.max_files, predictors)
        results.append(result)
        lines.extend(print_results(result, predictors, console))
    for line in lines:
        console.print(line, markup=False, highlight=False)
    if args.json:
        dump_json(Path(args.json), {"cpu_count": os.cpu_count(), "results": results})


if __name__ == "__main__":
    main()

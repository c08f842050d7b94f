"""``semsched lengths eval``: online output-length *distribution* predictors scored on one model's real answers.

``--data`` is an AlpacaEval ``model_outputs.json`` or an MT-Bench ``model_answer/<model>.jsonl``; ``--mode
online`` predicts its requests in file order, each from what finished before it (``--history`` files observed
first), ``--mode cross-model`` predicts them all from the other models' answers (``--history``, or every other
file of the benchmark in the shared data). See :mod:`semsched.predict.lengths_eval` for the rules and the
timing, :mod:`semsched.predict.length_registry` for the predictor specs (``--predictors`` takes them
comma-separated, e.g. ``semantic-knn:threshold=0.7,histogram``).

``--json`` prints one object: each predictor spec -> ``n``, ``crps``, ``log_loss``, ``bucket_accuracy``,
``mae_mean``, ``batched_ms_per_request``, ``single_ms_per_request``, ``observe_s``; and ``embedding`` ->
``batched_ms_per_request``, ``single_ms_per_request``, ``batch_size``, ``singles`` (the embedding forward pass,
uncached, CPU; ``null`` with ``--no-embedding-cost``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from semsched.cli.common import UsageError
from semsched.predict.embed import Embedder
from semsched.predict.lengths_eval import DEFAULT_PREDICTORS, MODES, LengthsEvalReport, evaluate


def register(sub: Any) -> None:
    parser = sub.add_parser("lengths", help="online output-length distribution predictors (seed 002)")
    commands = parser.add_subparsers(dest="lengths_command", required=True)
    evaluate_parser = commands.add_parser("eval", help="score predictors on one model's answers and time them")
    evaluate_parser.add_argument("--data", required=True, metavar="FILE",
                                 help="an AlpacaEval model_outputs.json or MT-Bench model_answer .jsonl")
    evaluate_parser.add_argument("--history", nargs="+", action="extend", metavar="PATH",
                                 help="answer files known before the run (online: warm-up; cross-model: default "
                                      "every other file of the benchmark)")
    evaluate_parser.add_argument("--mode", choices=MODES, default="online", help="default online")
    evaluate_parser.add_argument("--predictors", default=",".join(DEFAULT_PREDICTORS),
                                 help=f"comma-separated predictor specs (default {','.join(DEFAULT_PREDICTORS)})")
    evaluate_parser.add_argument("--no-embedding-cost", action="store_true",
                                 help="skip timing the embedding forward pass")
    evaluate_parser.add_argument("--json", action="store_true", help="print the results as JSON")
    evaluate_parser.set_defaults(handler=run_eval)


def _predictor_specs(text: str) -> list[str]:
    specs = [part.strip() for part in text.split(",") if part.strip()]
    if not specs:
        raise UsageError(f"--predictors: give at least one predictor spec (got {text!r})")
    return specs


def run_eval(args: argparse.Namespace, console: Console) -> int:
    timed = None if args.no_embedding_cost else Embedder(cache=False)
    specs = _predictor_specs(args.predictors)
    report = evaluate(args.data, mode=args.mode, history=args.history, predictors=specs, encoder=Embedder(),
                      embedding_encoder=timed)
    if args.json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
        return 0
    _show(console, report)
    return 0


def _show(console: Console, report: LengthsEvalReport) -> None:
    title = (f"{report.model} ({report.format}, {report.requests} requests), {report.mode}: history "
             f"{report.history_rows} rows from {len(report.history_files)} files")
    table = Table(title=title)
    columns = ("predictor", "CRPS", "log-loss", "bucket acc.", "MAE of mean", "ms/request batched",
               "ms/request single", "observe s")
    for column in columns:
        table.add_column(column, justify="left" if column == "predictor" else "right")
    for result in report.results:
        s = result.scores
        table.add_row(result.spec, f"{s.crps:.1f}", f"{s.log_loss:.3f}", f"{s.bucket_accuracy:.3f}",
                      f"{s.mae_mean:.1f}", f"{result.batched_ms:.3f}", f"{result.single_ms:.3f}",
                      f"{result.observe_s:.2f}")
    console.print(table)
    console.print("prediction times exclude the embedding forward pass; buckets: 100 tokens wide, 20, the last "
                  "open-ended", highlight=False)
    if report.embedding is not None:
        e = report.embedding
        console.print(f"embedding forward pass (all-MiniLM-L6-v2, uncached, CPU, {os.cpu_count()} cores): "
                      f"{e.batched_ms:.2f} ms/request in a batch of {e.batch_size}, {e.single_ms:.2f} ms/request "
                      f"alone (mean of {e.singles})", highlight=False)

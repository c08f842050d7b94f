"""``semsched length eval``: how well output-length buckets are predicted from the prompt, and at what cost.

Cross-validation grouped by prompt on MT-Bench or AlpacaEval answers (:func:`semsched.predict.length
.cross_validate`): the predictor beside the majority bucket, the training folds' bucket frequencies, seed 000's
noisy oracle at the predictor's accuracy and at its mean length error, and each prompt's own answers. Then the
time of one prediction (embedding + classification, uncached, CPU) per batch size.

``--json`` prints one object: ``cv`` (``dataset``, ``prompts``, ``answers``, ``folds``, ``max_output``,
``num_buckets``, ``training``, ``c``, ``oracle_error_same_accuracy``, ``oracle_error_same_length`` and ``rows``:
one per method with ``name``, ``n``, ``accuracy``, ``mean_abs_bucket_error``, ``mean_length_error``), ``cost``
(one per batch size: ``batch_size``, ``seconds_per_batch``, ``seconds_per_request``; empty with ``--no-cost``)
and ``cpu_count``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from semsched.cli.common import UsageError, check_seed
from semsched.predict.length import (
    DATASETS,
    DEFAULT_BATCH_SIZES,
    DEFAULT_C,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_NUM_BUCKETS,
    MAX_BUCKETS,
    MIN_BUCKETS,
    TRAININGS,
    LengthBucketPredictor,
    LengthBuckets,
    LengthCVReport,
    PredictionCost,
    cross_validate,
    load_answer_lengths,
    measure_cost,
)


def register(sub: Any) -> None:
    parser = sub.add_parser("length", help="output-length bucket predictors (seed 000)")
    commands = parser.add_subparsers(dest="length_command", required=True)
    evaluate = commands.add_parser("eval", help="cross-validate the bucket predictor and time a prediction")
    evaluate.add_argument("--data", choices=DATASETS, default="mt-bench", help="prompts and answers (default "
                          "mt-bench)")
    evaluate.add_argument("--buckets", type=int, default=DEFAULT_NUM_BUCKETS,
                          help=f"number of buckets, {MIN_BUCKETS}-{MAX_BUCKETS} (default {DEFAULT_NUM_BUCKETS})")
    evaluate.add_argument("--max-output", type=int, default=DEFAULT_MAX_OUTPUT,
                          help=f"longest output in tokens; longer answers count as this (default "
                               f"{DEFAULT_MAX_OUTPUT})")
    evaluate.add_argument("--folds", type=int, default=5, help="cross-validation folds over prompts (default 5)")
    evaluate.add_argument("--training", choices=TRAININGS, default="answers",
                          help="fit on every answer, or on each prompt's median (default answers)")
    evaluate.add_argument("--c", type=float, default=DEFAULT_C,
                          help=f"inverse regularisation of the classifier (default {DEFAULT_C:g})")
    evaluate.add_argument("--seed", type=int, default=0, help="folds and oracle seed (default 0)")
    evaluate.add_argument("--cost-batches", default=",".join(map(str, DEFAULT_BATCH_SIZES)),
                          help="batch sizes to time, comma-separated (default 1,4,16,64)")
    evaluate.add_argument("--cost-repeats", type=int, default=5, help="timed batches per size (default 5)")
    evaluate.add_argument("--no-cost", action="store_true", help="skip the timing")
    evaluate.add_argument("--json", action="store_true", help="print the results as JSON")
    evaluate.set_defaults(handler=run_eval)


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise UsageError(f"--cost-batches: must be integers >= 1, comma-separated (got {text!r})")
    return sizes


def _checked_buckets(args: argparse.Namespace) -> LengthBuckets:
    if not MIN_BUCKETS <= args.buckets <= MAX_BUCKETS:
        raise UsageError(f"--buckets: must be from {MIN_BUCKETS} to {MAX_BUCKETS} (got {args.buckets})")
    if args.max_output < args.buckets:
        raise UsageError(f"--max-output: must be at least --buckets ({args.buckets}) (got {args.max_output})")
    if not (math.isfinite(args.c) and args.c > 0):
        raise UsageError(f"--c: must be a finite number > 0 (got {args.c:g})")
    if args.folds < 2:
        raise UsageError(f"--folds: must be at least 2 (got {args.folds})")
    if args.cost_repeats < 1:
        raise UsageError(f"--cost-repeats: must be >= 1 (got {args.cost_repeats})")
    return LengthBuckets(args.max_output, args.buckets)


def run_eval(args: argparse.Namespace, console: Console) -> int:
    check_seed(args.seed)
    buckets = _checked_buckets(args)
    batch_sizes = () if args.no_cost else _batch_sizes(args.cost_batches)
    data = load_answer_lengths(args.data)
    if not 2 <= args.folds <= len(data):
        raise UsageError(f"--folds: must be from 2 to the number of prompts ({len(data)}) (got {args.folds})")
    predictor = LengthBucketPredictor(buckets, c=args.c, training=args.training, seed=args.seed)
    vectors = predictor.embedder.encode(data.prompts)
    report = cross_validate(data, buckets, folds=args.folds, c=args.c, training=args.training, seed=args.seed,
                            vectors=vectors)
    costs: list[PredictionCost] = []
    if batch_sizes:
        predictor.fit_embeddings(vectors, data)
        costs = measure_cost(predictor, data.prompts, batch_sizes, repeats=args.cost_repeats)
    if args.json:
        document = {"cv": report.as_dict(), "cost": [asdict(cost) for cost in costs], "cpu_count": os.cpu_count()}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return 0
    _show_cv(console, report)
    if costs:
        _show_cost(console, costs)
    return 0


def _show_cv(console: Console, report: LengthCVReport) -> None:
    b = report.buckets
    title = (f"{report.dataset}: {report.prompts} prompts, {report.answers} answers, {b.num_buckets} buckets up "
             f"to {b.max_output} tokens, {report.folds} folds by prompt (training: {report.training}, c "
             f"{report.c:g})")
    table = Table(title=title)
    for column in ("method", "bucket accuracy", "mean |bucket error|", "mean |length error| / max_output"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for row in report.rows:
        table.add_row(row.name, f"{row.accuracy:.3f}", f"{row.mean_abs_bucket_error:.3f}",
                      f"{row.mean_length_error:.3f}")
    console.print(table)
    console.print(f"oracle errors: {report.oracle_error_same_accuracy:.3f} (same accuracy), "
                  f"{report.oracle_error_same_length:.3f} (same length error); prompt-histogram is in-sample",
                  highlight=False)


def _show_cost(console: Console, costs: list[PredictionCost]) -> None:
    table = Table(title=f"cost of a prediction: embedding + classification, uncached, CPU "
                        f"({os.cpu_count()} cores)")
    for column in ("batch size", "ms per batch", "ms per request"):
        table.add_column(column, justify="right")
    for cost in costs:
        table.add_row(str(cost.batch_size), f"{cost.seconds_per_batch * 1e3:.1f}",
                      f"{cost.seconds_per_request * 1e3:.2f}")
    console.print(table)

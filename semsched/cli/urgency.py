"""``semsched urgency train | eval | cost``: the KTAS triage classifier (issue 15), judged against the nurses.

``train`` cross-validates the classifier on a KTAS file (held-out accuracy, macro-F1, under- and over-triage at
several under-triage thresholds, beside the file's own nurses), then fits it on the whole file and saves it.
``eval`` scores a saved model on any file with the same columns; ``--json`` prints the figures as one object.
``cost`` times its predictions per batch size, the figures the simulator's ``--predictor`` charges.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from semsched.cli.common import UsageError, check_seed, out_path, prepared_out_dir
from semsched.core.errors import SemschedError
from semsched.predict.ktas import TriageRecords, load_ktas
from semsched.predict.urgency import (
    DEFAULT_THRESHOLD,
    TEXT_FEATURES,
    TriageMetrics,
    UrgencyClassifier,
    cross_validate,
    measure_cost,
    metrics_dict,
    triage_metrics,
)

#: the thresholds ``train`` reports (0.5 is the median level; lower ones trade over-triage for less under-triage)
REPORTED_THRESHOLDS = (0.5, 0.45, 0.4, 0.35, 0.3, 0.25)


def register(sub: Any) -> None:
    parser = sub.add_parser("urgency", help="train or evaluate the KTAS triage urgency classifier")
    actions = parser.add_subparsers(dest="urgency_command", required=True)
    train = actions.add_parser("train", help="cross-validate on a KTAS file, then fit on all of it and save")
    train.add_argument("--data", type=Path, required=True, help="KTAS CSV (;-separated, as ../shared/data)")
    train.add_argument("--out", type=out_path, required=True, help="model directory to write")
    train.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                       help="under-triage threshold the saved model predicts at: the most urgent level whose "
                            f"cumulative probability reaches it (0 < t <= 1; default {DEFAULT_THRESHOLD})")
    train.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    train.add_argument("--text", choices=TEXT_FEATURES, default="tfidf",
                       help="complaint features: TF-IDF (default) or all-MiniLM-L6-v2 embeddings ([embed] extra)")
    train.add_argument("--c", type=float, default=3.0, help="inverse regularisation of the logistic regression")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--json", action="store_true", help="print the cross-validation figures as JSON")
    train.set_defaults(handler=train_command)
    evaluate = actions.add_parser("eval", help="score a saved model on a KTAS file, beside the file's nurses")
    evaluate.add_argument("--model", type=Path, required=True, help="directory written by `urgency train`")
    evaluate.add_argument("--data", type=Path, required=True, help="KTAS CSV with the same columns")
    evaluate.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    evaluate.set_defaults(handler=eval_command)
    cost = actions.add_parser("cost", help="time a saved model's predictions per batch size (what the simulator "
                                           "charges: --predictor)")
    cost.add_argument("--model", type=Path, required=True, help="directory written by `urgency train`")
    cost.add_argument("--data", type=Path, required=True, help="KTAS CSV whose rows are predicted")
    cost.add_argument("--batch-sizes", default="1,4,16,64", help="comma-separated (default 1,4,16,64)")
    cost.add_argument("--repeats", type=int, default=5, help="timed batches per size (median; default 5)")
    cost.add_argument("--json", action="store_true", help="print the figures as JSON")
    cost.set_defaults(handler=cost_command)


def _settings(args: argparse.Namespace) -> None:
    if not 0 < args.threshold <= 1:
        raise UsageError(f"--threshold: must be in (0, 1] (got {args.threshold})")
    if args.folds < 2:
        raise UsageError(f"--folds: must be at least 2 (got {args.folds})")
    if not args.c > 0:
        raise UsageError(f"--c: must be > 0 (got {args.c})")
    check_seed(args.seed)


def train_command(args: argparse.Namespace, console: Console) -> int:
    _settings(args)
    made = not args.out.exists()
    prepared_out_dir(args.out)  # a path that cannot be written fails now, not after the training
    try:
        return _train(args, console)
    except SemschedError:
        if made and args.out.is_dir() and not any(args.out.iterdir()):
            args.out.rmdir()  # a failed run leaves no empty model directory behind
        raise


def _train(args: argparse.Namespace, console: Console) -> int:
    records = load_ktas(args.data)
    if args.folds > len(records):
        raise UsageError(f"--folds: at most the number of rows ({len(records)}) (got {args.folds})")
    thresholds = sorted({*REPORTED_THRESHOLDS, args.threshold}, reverse=True)
    with console.status("cross-validating"):
        held_out = cross_validate(records, thresholds, folds=args.folds, c=args.c, seed=args.seed,
                                  text=args.text)
    nurses = triage_metrics(records.expert, records.nurse)
    model = UrgencyClassifier(threshold=args.threshold, c=args.c, seed=args.seed, text=args.text)
    with console.status("fitting on every row"):
        model.fit(records)
    model.metadata = {
        "data": str(args.data), "rows": len(records), "folds": args.folds,
        "cross_validation": {str(t): metrics_dict(m) for t, m in held_out.items()},
        "nurses": metrics_dict(nurses),
    }
    model.save(args.out)
    if args.json:
        console.print_json(json.dumps(model.metadata))
        return 0
    table = _table(f"held-out ({args.folds}-fold) vs the nurses, {len(records)} rows of {args.data}")
    for threshold, metrics in held_out.items():
        mark = " (saved)" if threshold == args.threshold else ""
        _row(table, f"classifier, threshold {threshold:g}{mark}", metrics)
    _row(table, "nurses (KTAS_RN vs KTAS_expert)", nurses)
    console.print(table)
    console.print(f"model: {args.out}", highlight=False)
    return 0


def eval_command(args: argparse.Namespace, console: Console) -> int:
    model = UrgencyClassifier.load(args.model)
    records = load_ktas(args.data)
    figures = evaluation(model, records)
    if args.json:
        console.print_json(json.dumps(figures))
        return 0
    table = _table(f"{args.model} on {len(records)} rows of {args.data} (threshold {model.threshold:g})")
    _row(table, "classifier", triage_metrics(records.expert, model.predict(records)))
    _row(table, "nurses (KTAS_RN vs KTAS_expert)", triage_metrics(records.expert, records.nurse))
    console.print(table)
    return 0


def cost_command(args: argparse.Namespace, console: Console) -> int:
    try:
        sizes = [int(size) for size in args.batch_sizes.split(",")]
    except ValueError:
        raise UsageError(f"--batch-sizes: comma-separated integers >= 1 (got {args.batch_sizes!r})") from None
    if any(size < 1 for size in sizes):
        raise UsageError(f"--batch-sizes: comma-separated integers >= 1 (got {args.batch_sizes!r})")
    if args.repeats < 1:
        raise UsageError(f"--repeats: must be at least 1 (got {args.repeats})")
    model = UrgencyClassifier.load(args.model)
    records = load_ktas(args.data)
    costs = measure_cost(model, records, sizes, repeats=args.repeats)
    if args.json:
        console.print_json(json.dumps({"text": model.text, "costs": [dataclasses.asdict(c) for c in costs]}))
        return 0
    table = Table(title=f"prediction cost of {args.model} ({model.text} features), median of {args.repeats}")
    for column in ("batch size", "s per batch", "ms per request"):
        table.add_column(column, justify="right")
    for c in costs:
        table.add_row(str(c.batch_size), f"{c.seconds_per_batch:.4f}", f"{c.seconds_per_request * 1e3:.2f}")
    console.print(table)
    console.print(f"simulate it: --predictor 'immediate:latency_s={costs[-1].seconds_per_batch:.4g};"
                  f"batch_size={costs[-1].batch_size}'", highlight=False)
    return 0


def evaluation(model: UrgencyClassifier, records: TriageRecords) -> dict[str, float | int]:
    """The model's figures against the expert labels, and the nurses' (``nurse_`` prefix)."""
    ours = triage_metrics(records.expert, model.predict(records))
    nurses = triage_metrics(records.expert, records.nurse)
    nurse_figures = {k: v for k, v in metrics_dict(nurses, "nurse_").items() if k != "nurse_n"}
    return {**metrics_dict(ours), **nurse_figures}


def _table(title: str) -> Table:
    table = Table(title=title)
    for column in ("", "accuracy", "macro-F1", "under-triage", "over-triage"):
        table.add_column(column, justify="left" if not column else "right")
    return table


def _row(table: Table, label: str, metrics: TriageMetrics) -> None:
    table.add_row(label, f"{metrics.accuracy:.1%}", f"{metrics.macro_f1:.3f}", f"{metrics.under_triage_rate:.1%}",
                  f"{metrics.over_triage_rate:.1%}")

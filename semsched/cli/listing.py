"""``semsched policies | profiles | workloads | tiers``: what can be named on the command line, with parameters."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from semsched.cli.common import UsageError
from semsched.core.specs import ParameterInfo, describe_parameters
from semsched.core.tiers import DEFAULT_TIERS, TIER_TABLE_KEYS, TierError
from semsched.latency import packaged_profiles, user_profile_dir, user_profiles
from semsched.metrics.units import MISSING, time_unit_for
from semsched.policies import POLICIES
from semsched.policies.tier_table import load_tier_table, tier_table_yaml
from semsched.workloads import WorkloadConfig, describe_workloads


def register(sub: Any) -> None:
    for name, handler, text in (
        ("policies", policies, "list policies and their parameters"),
        ("profiles", profiles, "list latency profiles"),
        ("workloads", workloads, "list named workloads and their parameters"),
    ):
        sub.add_parser(name, help=text).set_defaults(handler=handler)
    parser = sub.add_parser("tiers", help="show a tier table (default: the built-in one), or write it as YAML")
    parser.add_argument("table", nargs="?", type=Path, default=None, help="a YAML tier table to check and show")
    parser.add_argument("--yaml", action="store_true", help="print the table as YAML (a template to edit)")
    parser.set_defaults(handler=tiers)


def policies(args: argparse.Namespace, console: Console) -> int:
    for name in POLICIES.names():
        cls = POLICIES.get(name)
        doc = ((sys.modules[cls.__module__].__doc__ or "").strip().splitlines() or [""])[0]
        console.print(f"[bold]{name}[/]  {doc}", highlight=False)
        for param in describe_parameters(cls.config_cls):
            _print_parameter(console, param)
    console.print("[dim](spec: name:key=value;key=value; several policies: separate specs with ',')[/]")
    return 0


def profiles(args: argparse.Namespace, console: Console) -> int:
    for name in packaged_profiles():
        console.print(name)
    for name, path in user_profiles().items():
        console.print(f"{name}  [dim](user: {path})[/]", highlight=False)
    console.print(f"[dim](user profiles are read from {user_profile_dir()})[/]", highlight=False)
    return 0


def workloads(args: argparse.Namespace, console: Console) -> int:
    common = {p.name: p for p in describe_parameters(WorkloadConfig)}
    for info in describe_workloads():
        console.print(f"[bold]{info.name}[/]  {info.summary}", highlight=False)
        for param in info.parameters:
            if param.name not in common:
                _print_parameter(console, param)
    console.print("[bold]every workload[/] also takes:", highlight=False)
    for param in common.values():
        _print_parameter(console, param)
    console.print("[dim](spec: name:key=value;key=value, e.g. spikes:gap_s=30;max_concurrent=50; "
                  "a bare .csv/.jsonl path is trace:path=PATH)[/]", highlight=False)
    return 0


def tiers(args: argparse.Namespace, console: Console) -> int:
    try:
        table = DEFAULT_TIERS if args.table is None else load_tier_table(args.table)
    except TierError as error:
        raise UsageError(str(error)) from None
    if args.yaml:
        sys.stdout.write(tier_table_yaml(table))
        return 0
    columns = {"TTFT": "ttft_slo_s", "TPOT": "tpot_slo_s", "E2E": "e2e_slo_s"}
    units = [time_unit_for(getattr(t, column) for t in table) for column in columns.values()]
    grid = Table("tier", "priority", "weight",
                 *(f"{label} SLO ({unit.symbol})" for label, unit in zip(columns, units, strict=True)),
                 "fair share", "reserved", title=f"tier table: {args.table or 'built-in'}")
    for tier in table:
        grid.add_row(tier.name, str(tier.priority), f"{tier.weight:g}",
                     *(unit.format(getattr(tier, c)) for c, unit in zip(columns.values(), units, strict=True)),
                     f"{tier.fair_share:.0%}" if tier.fair_share else MISSING,
                     f"{tier.reserve_fraction:.0%}" if tier.reserve_fraction else MISSING)
    console.print(grid)
    console.print("keys of a tier in a YAML table (`semsched tiers --yaml` writes a template):", highlight=False)
    for key, doc in TIER_TABLE_KEYS.items():
        console.print(f"    {key}  [dim]{doc}[/]", highlight=False)
    return 0


def _print_parameter(console: Console, param: ParameterInfo) -> None:
    default = "" if param.default is None or param.default == "" else f" = {param.default!r}"
    doc = f"  [dim]{param.doc}[/]" if param.doc else ""
    console.print(f"    {param.name}: {param.type_name}{default}{doc}", highlight=False)

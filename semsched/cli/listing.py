"""``semsched policies | profiles | workloads``: what can be named on the command line, with parameters."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console

from semsched.core.specs import ParameterInfo, describe_parameters
from semsched.latency import packaged_profiles, user_profile_dir, user_profiles
from semsched.policies import POLICIES
from semsched.workloads import WorkloadConfig, describe_workloads


def register(sub: Any) -> None:
    for name, handler, text in (
        ("policies", policies, "list policies and their parameters"),
        ("profiles", profiles, "list latency profiles"),
        ("workloads", workloads, "list named workloads and their parameters"),
    ):
        sub.add_parser(name, help=text).set_defaults(handler=handler)


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


def _print_parameter(console: Console, param: ParameterInfo) -> None:
    default = "" if param.default is None or param.default == "" else f" = {param.default!r}"
    doc = f"  [dim]{param.doc}[/]" if param.doc else ""
    console.print(f"    {param.name}: {param.type_name}{default}{doc}", highlight=False)

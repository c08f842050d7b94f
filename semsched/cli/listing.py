"""``semsched policies | profiles | workloads``: what can be named on the command line, with parameters."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from rich.console import Console

from semsched.latency import packaged_profiles, user_profile_dir, user_profiles
from semsched.policies import POLICIES
from semsched.workloads import WORKLOADS


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
        params = "; ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls.config_cls))
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        console.print(f"[bold]{name}[/] {params}\n    {doc}", highlight=False)
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
    for name in sorted(WORKLOADS):
        console.print(name)
    console.print("(or a path to an Azure-format .csv or Mooncake-format .jsonl trace)")
    return 0

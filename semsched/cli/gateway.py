"""``semsched gateway --config gateway.yaml``: the OpenAI-compatible front door (``semsched.gateway``), served
with uvicorn. ``--check`` only reads and checks the file (and loads its models) and prints the settings in force
(keys redacted). While it serves, SIGHUP re-reads the file (:mod:`semsched.gateway.reload`).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from rich.console import Console


def register(sub: Any) -> None:
    parser = sub.add_parser("gateway", help="serve the gateway in front of vLLM servers (docs/gateway.md)")
    parser.add_argument("--config", type=Path, required=True, help="the gateway's YAML file")
    parser.add_argument("--host", help="listen address (default: the file's host, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default: the file's port, else 8080)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--check", action="store_true", help="check the file, print the settings, serve nothing")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from semsched.gateway.config import GatewayConfigError, load_config

    config = load_config(args.config)
    updates: dict[str, Any] = {}
    if args.host is not None:
        updates["host"] = args.host
    if args.port is not None:
        if not 0 <= args.port <= 65535:
            raise GatewayConfigError(f"--port: must be from 0 to 65535 (got {args.port})")
        updates["port"] = args.port
    config = config.model_copy(update=updates)
    from semsched.gateway.app import create_app

    # builds every part: a bad model or router fails here, before serving; SIGHUP re-reads the file
    app = create_app(config, config_path=args.config, handle_sighup=not args.check)
    app.state.gateway.overrides = updates
    if args.check:
        from semsched.gateway.config import shown_settings

        console.print_json(json.dumps(shown_settings(config)))
        return 0
    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console.print(f"[bold]semsched gateway[/] on http://{config.host}:{config.port} in front of "
                  f"{len(config.backends)} backend(s), router {config.routing.router}", highlight=False)
    uvicorn.run(app, host=config.host, port=config.port, log_level=args.log_level, access_log=False)
    return 0

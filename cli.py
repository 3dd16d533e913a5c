"""Command line: serve | models | generate | bench. `python cli.py COMMAND --help` for each."""

from __future__ import annotations

import argparse
import sys

from config import get_settings


def cmd_serve(args: argparse.Namespace) -> int:
    from utils.embedded.server import serve

    serve(args.host, args.port or get_settings().embedded_port, get_settings())
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from utils.embedded.models import ModelError, ModelStore

    store = ModelStore(get_settings().models_dir)
    if args.action == "list":
        for name, spec in store.catalogue.items():
            state = "installed" if store.is_installed(name) else "not installed"
            print(f"{name:22} {spec.size / 1e6:8,.0f} MB  {state:13}  {spec.description}")
        return 0
    names = args.names or [get_settings().target_model, get_settings().draft_model, "smollm2:135m"]
    for name in names:
        try:
            store.install(name)
        except ModelError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cli.py", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the embedded Ollama-compatible server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=None)
    serve.set_defaults(run=cmd_serve)

    models = commands.add_parser("models", help="list or install the bundled models")
    models.add_argument("action", choices=["list", "install"])
    models.add_argument("names", nargs="*", help="model names (install: default target, draft, smollm2)")
    models.set_defaults(run=cmd_models)

    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

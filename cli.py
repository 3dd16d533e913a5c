"""Command line: serve | proxy | models | generate | bench, and the benchmark probes bench-overhead |
bench-verification | bench-decode | bench-ceiling | bench-proxy | bench-soak | bench-extract | bench-load.
`python cli.py COMMAND --help` for each."""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
from pathlib import Path

from config import get_settings
from utils.arguments import answer_format, bench_k, draft_length, non_negative, probability, think


def cmd_serve(args: argparse.Namespace) -> int:
    from utils.embedded.server import serve
    from utils.proxy.pairs import PairError, parse_pairs

    settings = get_settings()
    try:
        pairs = parse_pairs(args.pair or [p for p in settings.pairs.split(",") if p.strip()]) or None
    except PairError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2

    def speculation(store):  # noqa: ANN001, ANN202 - called by serve once llama.cpp is loaded
        from utils.proxy.in_process import default_pairs, speculating

        chosen = pairs if pairs is not None else default_pairs(store)
        return speculating(settings, chosen, args.k), chosen

    def counting():  # noqa: ANN202 - with speculation off, /metrics still counts the answers
        from utils.proxy.front import CountingFront

        return CountingFront

    serve(args.host, args.port or settings.embedded_port, settings, batch=not args.no_batch,
          speculation=None if args.no_speculation else speculation, unspeculated=counting)
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    import asyncio

    import uvicorn
    from pydantic import ValidationError

    from utils.api.cors import origins_from_env
    from utils.engine.client import OllamaClient
    from utils.errors import SpecError
    from utils.hosts import target_host
    from utils.proxy.app import ProxyConfig, create_proxy, is_loopback
    from utils.proxy.pairs import default_pairs, parse_pairs

    try:
        settings = get_settings().with_engine(p_min=args.p_min, draft_top_k=args.top_k_draft)
    except (ValidationError, ValueError) as error:
        print(f"error: invalid settings: {error}", file=sys.stderr)
        return 2
    if not is_loopback(args.host) and not settings.api_key and not args.insecure:
        print(f"error: listening on {args.host} lets anyone who reaches it run your models: set SPEC_API_KEY "
              "(clients then send 'Authorization: Bearer <key>'), or pass --insecure to allow it without a key",
              file=sys.stderr)
        return 2
    try:
        pairs = parse_pairs(args.pair or [p for p in settings.pairs.split(",") if p.strip()])
        upstream = args.upstream or settings.upstream or target_host(settings)
        if not pairs:
            server = OllamaClient(upstream, connect_timeout=settings.engine.connect_timeout)
            try:
                pairs = asyncio.run(default_pairs(server, settings.target_model, settings.draft_model,
                                                  draft_host=args.draft_host))
            finally:
                asyncio.run(server.aclose())
    except SpecError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    config = ProxyConfig(upstream=upstream, pairs=pairs, engine=settings.engine,
                         draft_host=args.draft_host or settings.draft_host, api_key=settings.api_key,
                         origins=origins_from_env(), k=args.k)
    port = args.port or settings.proxy_port
    print(f"speculative proxy on http://{args.host}:{port} in front of {upstream}; "
          f"pairs: {', '.join(f'{t}={d}' for t, d in pairs.items()) or 'none'}", file=sys.stderr, flush=True)
    uvicorn.run(create_proxy(config), host=args.host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from utils.embedded.store.models import ModelError, ModelStore

    store = ModelStore(get_settings().models_dir, get_settings().source_dirs)
    if args.action == "list":
        for name, spec in store.catalogue.items():
            state = "installed" if store.is_installed(name) else "not installed"
            print(f"{name:22} {spec.size / 1e6:8,.0f} MB  {state:13}  {spec.description}")
        for name in store.registry.names():
            spec = store.spec(name)
            state = "registered" if store.is_installed(name) else "file missing"
            print(f"{name:22} {spec.size / 1e6:8,.0f} MB  {state:13}  {spec.file}")
        return 0
    if args.action in ("add", "import-ollama"):
        return _register(store, args)
    names = args.names or [get_settings().target_model, get_settings().draft_model, "smollm2:135m"]
    for name in names:
        try:
            store.install(name)
        except ModelError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


def _register(store, args: argparse.Namespace) -> int:
    """`models add NAME FILE.gguf` and `models import-ollama [DIR]`: serve files where they are."""

    from utils.embedded.store.library import DEFAULT_OLLAMA_DIR, LibraryError, import_ollama, register_file
    from utils.embedded.store.parameters import ParameterError, from_text

    try:
        if args.action == "add":
            if len(args.names) != 2:
                print("usage: python cli.py models add NAME FILE.gguf [--param NAME=VALUE ...]", file=sys.stderr)
                return 2
            parameters = from_text(pair.partition("=")[::2] for pair in args.param)  # Modelfile PARAMETER lines
            spec = register_file(store, args.names[0], Path(args.names[1]), f"models add {args.names[1]}",
                                 parameters=parameters)
            print(f"{spec.name}: registered ({spec.file}, {spec.size / 1e6:,.0f} MB, sha256 {spec.sha256[:12]}…)")
            return 0
        if len(args.names) > 1:
            print("usage: python cli.py models import-ollama [DIR]", file=sys.stderr)
            return 2
        imported = import_ollama(store, Path(args.names[0]) if args.names else DEFAULT_OLLAMA_DIR)
    except (LibraryError, ParameterError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for item in imported:
        print(f"{item.name}: {item.note}")
    if not imported:
        print("no models found", file=sys.stderr)
    return 0 if any(item.note.startswith("registered") for item in imported) else 1


def cmd_generate(args: argparse.Namespace) -> int:
    import asyncio

    from pydantic import ValidationError

    from utils.engine.events import GenerationError
    from utils.engine.request import GenerationRequest
    from utils.errors import SpecError
    from utils.hosts import generate_once
    try:
        settings = get_settings()
        settings = settings.with_engine(p_min=args.p_min, draft_top_k=args.top_k_draft)
        # Only the options given (on the command line or SPEC_NUM_CTX): the model's own parameters
        # (its Modelfile) apply to the rest, as for any Ollama client.
        given = {"temperature": args.temperature, "top_k": args.top_k, "seed": args.seed}
        options = {**{key: value for key, value in given.items() if value is not None},
                   **settings.engine.context_options()}
        request = GenerationRequest(prompt=args.prompt, raw=not args.chat, options=options,
                                    max_tokens=args.max_tokens, k=args.k, stop=args.stop or None,
                                    format=args.format, think=args.think)
        result = asyncio.run(generate_once(
            settings, request, target=args.target, drafter=args.draft, host=args.host,
            draft_host=args.draft_host, echo=None if args.json else _echo,
            echo_thinking=None if args.json else _echo_thinking,
        ))
    except ValidationError as error:
        print(f"error: invalid settings: {_problems(error)}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"error: invalid settings: {error}", file=sys.stderr)
        return 2
    except SpecError as error:
        if isinstance(error, GenerationError) and error.partial and not args.json:
            print()
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print()
        stats = result["stats"]
        print(
            f"[{result['mode']}: {stats['output_tokens']} tokens, {stats['tokens_per_second']:.1f} tok/s, "
            f"accepted {stats['accepted_tokens']}/{stats['drafted_tokens']} drafted]",
            file=sys.stderr,
        )
        for fallback in stats["fallbacks"]:
            print(f"[note: {fallback['reason']}]", file=sys.stderr)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:

    from utils.bench.reasoning import default_target
    from utils.bench.runner import BenchConfig, run_bench
    from utils.errors import SpecError

    target = args.target or default_target(Path(args.prompts), get_settings().target_model)
    if not args.target and target != get_settings().target_model:
        print(f"[these prompts think: benchmarked on {target}, a STAND-IN thinking model (utils/bench/stand_in.py);"
              " --target names another]", file=sys.stderr)
    config = BenchConfig(
        prompts_file=Path(args.prompts), target=target, drafters=args.draft or [get_settings().draft_model],
        ks=args.k or ["auto"], repeat=args.repeat, out_dir=Path(args.out) if args.out else None, limit=args.limit,
        max_tokens=args.max_tokens, categories=args.category, host=args.host, native=args.native,
        in_process=args.in_process,
    )

    def progress(done: int, total: int, label: str) -> None:
        width = 30
        filled = width * done // max(total, 1)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:70]:70}", end="", file=sys.stderr,
              flush=True)

    try:
        out_dir = run_bench(get_settings(), config, progress)
    except KeyboardInterrupt:
        print("\ninterrupted: finished runs are saved in results.json; run the same command again to resume",
              file=sys.stderr)
        return 130
    except SpecError as error:
        print(f"\nerror: {error.message}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"\nerror: {error}", file=sys.stderr)
        return 1
    print(f"\n{(out_dir / 'report.md').read_text()}\nwritten to {out_dir}")
    return 0


def _pairing(command: argparse.ArgumentParser, default: str) -> None:
    """`--pair` and `--k`, the same for `serve` and `proxy`."""
    command.add_argument("--pair", action="append", metavar="TARGET=DRAFTER",
                         help=f"speculate for TARGET with DRAFTER, a draft model, 'lookup' or 'suffix' (repeatable; "
                              f"{default})")
    command.add_argument("--k", type=draft_length, default=None,
                         help="a fixed draft length for every speculated answer (default: the controller chooses "
                              "it, down to standard generation where speculation does not pay)")




def _problems(error) -> str:
    """A pydantic ValidationError in one line (its own message spans several)."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())


def _echo(text: str) -> None:
    print(text, end="", flush=True)


def _echo_thinking(text: str) -> None:
    """A thinking model's reasoning goes to stderr, so that stdout is the answer alone."""
    print(text, end="", flush=True, file=sys.stderr)






# Benchmark probes, each a module of utils/bench/ with its own options, run by its main(argv).
PROBES = {
    "bench-overhead": ("utils.bench.overhead", "time outside the engine: drafts, bursts, projected speed-up"),
    "bench-verification": ("utils.bench.verification", "a validator burst's cost against one request's"),
    "bench-decode": ("utils.bench.decode", "plain decoding: a draft model beside the target, fast batch kernels"),
    "bench-ceiling": ("utils.bench.ceiling", "the most a drafter can give here: a clairvoyant controller"),
    "bench-proxy": ("utils.bench.proxy", "through the speculative proxy against straight to its upstream"),
    "bench-soak": ("utils.bench.soak", "soak test of the embedded server: mixed requests, failures, memory"),
    "bench-extract": ("utils.bench.extraction", "structured extraction (format) speculated by cli.py serve"),
    "bench-load": ("utils.bench.load", "N clients at once, speculation off and on interleaved: tok/s, latency"),
}


class Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake said in one line instead of the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="cli.py", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the embedded Ollama-compatible server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--no-batch", action="store_true",
                       help="evaluate requests one at a time, as Ollama does with OLLAMA_NUM_PARALLEL=1")
    serve.add_argument("--no-speculation", action="store_true",
                       help="answer every request by standard generation (a request can ask for it with the "
                            "header 'X-Speculation: off')")
    _pairing(serve, "default: SPEC_PAIRS, else 'suffix' for every installed model")
    serve.set_defaults(run=cmd_serve)

    proxy = commands.add_parser("proxy", help="a speculative Ollama proxy: point any Ollama client at it")
    proxy.add_argument("--upstream", default=None,
                       help="the Ollama to front (default: SPEC_UPSTREAM, OLLAMA_HOST, else the embedded server)")
    proxy.add_argument("--host", default="127.0.0.1", help="address to listen on (non-loopback needs SPEC_API_KEY)")
    proxy.add_argument("--port", type=int, default=None, help="port to listen on (default: SPEC_PROXY_PORT, 11435)")
    proxy.add_argument("--draft-host", default=None, help="the Ollama that runs draft models (default: upstream)")
    _pairing(proxy, "default: SPEC_PAIRS, else 'suffix' for every upstream model and the draft model for "
                    "the target")
    proxy.add_argument("--p-min", type=probability, default=None,
                       help="stop a draft below this probability (default: SPEC_P_MIN)")
    proxy.add_argument("--top-k-draft", type=int, default=None,
                       help="draft candidates read per position (default: SPEC_DRAFT_TOP_K)")
    proxy.add_argument("--insecure", action="store_true", help="allow a non-loopback address without an API key")
    proxy.set_defaults(run=cmd_proxy)

    models = commands.add_parser("models", help="list or install the bundled models, register your own GGUF files")
    models.add_argument("action", choices=["list", "install", "add", "import-ollama"],
                        help="add NAME FILE.gguf: serve your GGUF file; import-ollama [DIR]: the models of an "
                             "Ollama installation (default ~/.ollama/models), used in place")
    models.add_argument("names", nargs="*", help="model names (install: default target, draft, smollm2)")
    models.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help='add: a Modelfile parameter of the model (repeatable: --param temperature=0 '
                             '--param stop="def "), applied under each request\'s options')
    models.set_defaults(run=cmd_models)

    generate = commands.add_parser("generate", help="answer one prompt, standard or speculative")
    generate.add_argument("--prompt", required=True)
    generate.add_argument("--chat", action="store_true", help="apply the model's chat template")
    generate.add_argument("--target", default=get_settings().target_model)
    generate.add_argument("--draft", default=get_settings().draft_model,
                          help="a draft model, 'lookup' (prompt lookup), 'suffix' or 'none' (standard)")
    generate.add_argument("--k", type=draft_length, default=None, help="fixed draft length (default: adaptive)")
    generate.add_argument("--p-min", type=probability, default=None)
    generate.add_argument("--top-k", type=non_negative, default=None,
                          help="sampling top-k of the answer (default: the model's, else Ollama's 40)")
    generate.add_argument("--top-k-draft", type=int, default=None, help="draft candidates read per position")
    generate.add_argument("--temperature", type=float, default=0.0,
                          help="sampling temperature (default 0: greedy, the target's own answer)")
    generate.add_argument("--think", type=think, default=None,
                          help="a thinking model's reasoning: true, false, high, medium or low (default: the model's)")
    generate.add_argument("--seed", type=int, default=None)
    generate.add_argument("--max-tokens", type=int, default=256)
    generate.add_argument("--stop", action="append", help="a stop string (repeatable)")
    generate.add_argument("--format", type=answer_format, default=None,
                          help="'json' or a JSON schema (inline or a file): constrained, generated standard")
    generate.add_argument("--host", default=None, help="Ollama server (default: OLLAMA_HOST, else embedded)")
    generate.add_argument("--draft-host", default=None, help="server of the draft model (default: --host)")
    generate.add_argument("--json", action="store_true", help="print one JSON object at the end")
    generate.set_defaults(run=cmd_generate)

    bench = commands.add_parser("bench", help="benchmark speculative against standard generation")
    bench.add_argument("--prompts", default="prompts/bench.jsonl",
                       help="JSON lines: id, category, prompt, chat, max_tokens, think (a thinking prompt's)")
    bench.add_argument("--target", default=None,
                       help="the target model (default: the settings' target; for prompts that think, the stand-in "
                            "thinking model)")
    bench.add_argument("--draft", action="append",
                       help="draft model, 'lookup' or 'suffix' (repeatable; default: the draft model)")
    bench.add_argument("--k", action="append", type=bench_k, help="'auto' or a fixed K (repeatable; default auto)")
    bench.add_argument("--repeat", type=int, default=1)
    bench.add_argument("--limit", type=int, default=None, help="at most N prompts per category")
    bench.add_argument("--category", action="append", help="only this category (repeatable)")
    bench.add_argument("--max-tokens", type=int, default=None, help="override each prompt's max_tokens")
    bench.add_argument("--out", default=None,
                       help="output folder (default: DATA_DIR/bench/TIMESTAMP); reuse it to resume")
    bench.add_argument("--host", default=None)
    bench.add_argument("--native", action="store_true",
                       help="also run llama.cpp's own speculative decoding (llama-server), built on first use")
    bench.add_argument("--in-process", action="store_true",
                       help="the project's engine on the embedded server loaded in this process, as `cli.py serve` "
                            "speculates (default: over HTTP, as the proxy does)")
    bench.set_defaults(run=cmd_bench)

    for name, (module, help_text) in PROBES.items():  # each reads its own options: cli.py NAME --help
        probe = commands.add_parser(name, help=help_text, add_help=False, prefix_chars="\0")  # all passed on
        probe.add_argument("options", nargs=argparse.REMAINDER)
        probe.set_defaults(run=lambda args, module=module: importlib.import_module(module).main(args.options))
    return parser


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    try:
        get_settings()
    except ValidationError as error:  # an out-of-range SPEC_ variable or .env line: no traceback
        print(f"error: invalid settings in the environment or .env: {_problems(error)}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    # `kill PID` ends a command as Ctrl-C does, through its `finally` blocks, so that the servers it
    # started (the benchmark's llama-servers, an embedded server) are stopped rather than left running.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

"""The benchmark probes as `cli.py` subcommands: every runnable module of utils/bench/ has one, and
each passes its options on, untouched, to the module's own main(argv)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parents[2]


def test_every_runnable_benchmark_module_is_a_subcommand() -> None:
    runnable = {f"utils.bench.{path.stem}" for path in (ROOT / "utils" / "bench").glob("*.py")
                if 'if __name__ == "__main__"' in path.read_text()}
    assert runnable == {module for module, _ in cli.PROBES.values()}


@pytest.mark.parametrize("name", sorted(cli.PROBES))
def test_a_probe_gets_its_options_as_given(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(cli.PROBES[name][0])
    seen: list[list[str]] = []
    monkeypatch.setattr(module, "main", lambda argv: seen.append(argv) or 0)
    options = ["--help", "--repeat", "2", "-x", "value"]
    args = cli.build_parser().parse_args([name, *options])
    assert args.run(args) == 0 and seen == [options]


def test_a_probe_reads_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["bench-verification", "--help"])
    assert ended.value.code == 0
    assert capsys.readouterr().out.startswith("usage: cli.py bench-verification ")

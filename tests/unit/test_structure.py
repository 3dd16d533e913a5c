"""The layers as the README draws them, read from the source with `ast`: the engine imports nothing of
the app, the server, the benchmarks or the top-level settings; the embedded server nothing of the
engine, and each of its parts (store, runtime, http) nothing of the parts above it; no test module
imports another test module or a conftest (shared helpers live in tests/support/, fixtures in
conftest.py files); and no module, tests included, grows past 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
# What the engine (utils/engine/) must never import: it runs under any app, server or benchmark.
NOT_FOR_THE_ENGINE = ["utils.embedded", "utils.api", "utils.proxy", "utils.app", "utils.bench", "utils.hosts",
                      "streamlit", "config"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute; `from a import b` counts as a and a.b (b may be a module)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    return imports_in(path.read_text(), package)


def imports_in(source: str, package: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_module_names_and_imports_are_read_right() -> None:
    assert module_name(ROOT / "utils" / "engine" / "drafters" / "__init__.py") == "utils.engine.drafters"
    assert module_name(ROOT / "utils" / "engine" / "drafters" / "lookup.py") == "utils.engine.drafters.lookup"
    assert within("utils.app.store", "utils.app") and not within("utils.apps", "utils.app")
    assert within("config", "config") and not within("utils.engine.config", "config")
    source = "import streamlit as st\nfrom . import base\nfrom ..client import Step\nfrom utils import app\n"
    assert imports_in(source, "utils.engine.drafters") == {
        "streamlit", "utils.engine.drafters", "utils.engine.drafters.base", "utils.engine.client",
        "utils.engine.client.Step", "utils", "utils.app",
    }
    # Imports inside functions count too: the engine must not reach the app lazily either.
    assert imports_in("def f():\n    import config\n", "utils.engine") == {"config"}
    # A test module's imports of other test modules, absolute or relative, and of conftest files.
    test_imports = imports_in("from .test_app import open_app\nimport tests.conftest\nfrom tests.support import app\n",
                              "tests.unit")
    assert sorted(name for name in test_imports if is_test_module(name)) == [
        "tests.conftest", "tests.unit.test_app", "tests.unit.test_app.open_app"]
    assert not is_test_module("tests.support.app") and not is_test_module("utils.engine.tests")


@pytest.mark.parametrize("path", modules("utils/engine"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_imports_no_app_server_or_settings(path: Path) -> None:
    bad = sorted(name for name in imports(path) for layer in NOT_FOR_THE_ENGINE if within(name, layer))
    assert not bad, f"{path.relative_to(ROOT)} imports {', '.join(bad)}"


# What of the engine the embedded server may import: its in-process target implements the engine's
# `Target` interface, and that interface is all it knows of the engine. The speculating front for
# `cli.py serve` is composed above it (utils/proxy/in_process.py).
THE_ENGINES_INTERFACE = "utils.engine.target"


def test_the_embedded_server_imports_only_the_engines_target_interface() -> None:
    bad = {}
    for path in modules("utils/embedded"):
        bad[str(path.relative_to(ROOT))] = sorted(
            n for n in imports(path)
            if within(n, "utils.proxy") or (within(n, "utils.engine") and not within(n, THE_ENGINES_INTERFACE)))
    assert not {path: names for path, names in bad.items() if names}
    assert "utils/embedded/runtime/runner.py" in bad  # the folder was found and read
    assert THE_ENGINES_INTERFACE in imports(ROOT / "utils/embedded/http/target.py")


# The embedded server's parts (utils/embedded/__init__.py), each importing only the parts before it;
# server.py, which starts the server, stands above them all.
EMBEDDED_PARTS = ["utils.embedded.store", "utils.embedded.runtime", "utils.embedded.http"]


@pytest.mark.parametrize("index", range(len(EMBEDDED_PARTS)), ids=EMBEDDED_PARTS)
def test_each_part_of_the_embedded_server_imports_only_the_parts_before_it(index: int) -> None:
    later = [*EMBEDDED_PARTS[index + 1:], "utils.embedded.server"]
    paths = modules(EMBEDDED_PARTS[index].replace(".", "/"))
    bad = {str(path.relative_to(ROOT)): sorted(n for n in imports(path) for part in later if within(n, part))
           for path in paths}
    assert not {path: names for path, names in bad.items() if names}
    assert len(paths) > 3  # the folder was found and read


def test_the_embedded_server_is_its_parts_and_its_launcher() -> None:
    """No module lies beside the parts, and no folder beside them is left out of the layer check."""
    folder = ROOT / "utils" / "embedded"
    assert sorted(path.name for path in folder.glob("*.py")) == ["__init__.py", "server.py"]
    folders = sorted(path.name for path in folder.iterdir() if path.is_dir() and path.name != "__pycache__")
    assert folders == sorted(part.rpartition(".")[2] for part in EMBEDDED_PARTS)


def test_the_runner_is_the_first_of_the_runtime_to_load_llama_cpp() -> None:
    """runtime/runner.py loads llama.cpp's libraries before numpy's; the packages above it import nothing."""
    for package in ("utils/embedded/__init__.py", "utils/embedded/runtime/__init__.py"):
        assert not imports(ROOT / package), package


def is_test_module(name: str) -> bool:
    """A test module (tests/.../test_*.py) or a conftest, or a name inside one."""
    parts = name.split(".")
    return parts[0] == "tests" and any(part.startswith("test_") or part == "conftest" for part in parts[1:])


@pytest.mark.parametrize("path", modules("tests"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_module_imports_another_test_module_or_a_conftest(path: Path) -> None:
    """Importing a test module runs its tests' module code twice and ties the tests to each other's
    order; pytest itself loads conftest files (imported again, they run twice too)."""
    own = module_name(path)
    bad = sorted(name for name in imports(path) if is_test_module(name) and not within(name, own))
    assert not bad, f"{path.relative_to(ROOT)} imports {', '.join(bad)}: move it to tests/support/ or a conftest.py"


def project_modules() -> dict[str, Path]:
    paths = modules("utils") + sorted(ROOT.glob("*.py"))
    return {module_name(path): path for path in paths}


def reachable(start: str, known: dict[str, Path], cyclic: bool = False) -> dict[str, str]:
    """Every project module `start` imports directly or through other project modules, each with the
    module that imported it (a package's __init__ runs too when one of its modules is imported)."""
    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        current = todo.pop()
        for name in imports(known[current]):
            parts = name.split(".")
            for size in range(1, len(parts) + 1):
                module = ".".join(parts[:size])
                if within(current, module):  # its own package: already running when `current` is read
                    continue
                if module in known and module not in seen and (cyclic or module != start):
                    seen[module] = current
                    todo.append(module)
    return seen


def test_the_engine_reaches_no_app_server_or_settings_through_shared_modules() -> None:
    known = project_modules()
    engine = [name for name in known if within(name, "utils.engine")]
    assert "utils.engine.validator" in engine and "utils.sampling" in reachable("utils.engine.validator", known)
    problems = [f"{name} -> ... {via} -> {module}"
                for name in engine for module, via in reachable(name, known).items()
                if any(within(module, layer) for layer in NOT_FOR_THE_ENGINE)]
    assert not problems


def test_no_module_over_400_lines() -> None:
    paths = modules("utils") + modules("pages") + modules("tests") + sorted(ROOT.glob("*.py"))
    assert len(paths) > 20
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in paths}
    over = {path: lines for path, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines: " + ", ".join(f"{p} ({n})" for p, n in sorted(over.items()))


def test_no_import_cycle_among_the_projects_modules() -> None:
    """Counting imports inside functions and under TYPE_CHECKING: a cycle is two modules that each need
    the other to be read, whichever way the import is deferred."""
    known = project_modules()
    cycles = sorted(f"{name} -> ... -> {name}" for name in known if name in reachable(name, known, cyclic=True))
    assert not cycles
    assert "utils.engine.decoder" in known and len(known) > 100

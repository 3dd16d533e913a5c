"""An embedded server on a data folder of its own, for tests that create or delete models: the
user's data folder (and the session's server) are never written.

Its catalogue models are symbolic links to the installed files, with their verification stamps, so
nothing is copied or hashed again; a model created from one of them registers the installed file
where it is, and deleting that name never touches the file.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from config import Settings
from utils.embedded.server import EmbeddedServer
from utils.embedded.store.models import ModelStore


@contextmanager
def own_server(folder: Path, models: tuple[str, ...], speculation: bool = False,
               args: tuple[str, ...] = ()) -> Iterator[str]:
    """The URL of a server whose data folder is `folder` and whose catalogue has `models` installed;
    `speculation`: as `cli.py serve` starts by default (with `args`), else `--no-speculation`."""
    installed = ModelStore(Settings().models_dir)
    own = ModelStore(folder / "models")
    own.models_dir.mkdir(parents=True, exist_ok=True)
    for name in models:
        spec = installed.spec(name)
        (own.models_dir / spec.file).symlink_to(installed.path(name))
        if installed.stamp_path(spec).is_file():  # its sha256, checked at install: not hashed again
            shutil.copyfile(installed.stamp_path(spec), own.stamp_path(spec))
    server = EmbeddedServer(log_path=folder / "server.log", speculation=speculation, args=list(args))
    with pytest.MonkeyPatch.context() as patch:  # the server's environment only, not this process's
        patch.setenv("SPEC_DATA_DIR", str(folder))
        server.start()
    try:
        yield server.url
    finally:
        server.stop()

"""The app's server keeper (utils/app/lifecycle.py) on a real embedded server: started once, started
again on its port after it was killed, restarted on request, and honest about what happened."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from config import Settings
from tests.support.models import SMALL
from utils.app.lifecycle import AppServer, ended
from utils.embedded.store.models import ModelStore
from utils.hosts import HostError


@pytest.fixture
def settings(tmp_path) -> Settings:
    """No OLLAMA_HOST, and a data folder holding only the smallest model, linked from the shared one."""
    shared = Settings().models_dir
    (tmp_path / "models").mkdir()
    path = ModelStore(shared).path(SMALL)
    for file in (path, path.with_name(path.name + ".verified")):
        (tmp_path / "models" / file.name).symlink_to(file)
    return Settings(OLLAMA_HOST=None, data_dir=tmp_path)


def test_a_killed_server_is_started_again_on_its_port_and_a_restart_works(settings):
    keeper = AppServer(settings)
    try:
        url = keeper.url()
        first = keeper.pid
        assert keeper.owns_server and first and httpx.get(f"{url}/api/version").is_success
        assert keeper.revive() is None  # running: nothing to do, nothing to say

        os.kill(first, signal.SIGKILL)
        keeper.embedded.process.wait(timeout=10)
        assert keeper.url() == url  # the same address: cached clients and settings stay valid
        assert keeper.pid not in (None, first) and httpx.get(f"{url}/api/version").is_success
        [restart] = keeper.restarts
        assert restart.why == "was killed by signal SIGKILL" and restart.ok

        second = keeper.pid
        os.kill(second, signal.SIGKILL)
        note = keeper.revive()  # after a failed answer: started again at once, and said so
        assert note == ("The embedded server this app started was killed by signal SIGKILL while answering; the app "
                        "started it again, so ask again or regenerate the answer.")
        assert keeper.pid not in (None, second)

        third = keeper.pid
        assert keeper.restart() == url and keeper.pid not in (None, third)  # the sidebar's Restart
        assert [r.why for r in keeper.restarts][-1] == "was restarted from the sidebar"
        assert keeper.log_path.exists()
    finally:
        if keeper.embedded:
            keeper.embedded.stop()


def test_no_model_installed_says_what_to_do(tmp_path):
    with pytest.raises(HostError, match="no bundled model installed"):
        AppServer(Settings(OLLAMA_HOST=None, data_dir=tmp_path)).url()


def test_ollama_host_is_never_started_here(tmp_path):
    keeper = AppServer(Settings(OLLAMA_HOST="http://127.0.0.1:9", data_dir=tmp_path))
    assert not keeper.owns_server and keeper.revive() is None
    with pytest.raises(HostError, match="unset OLLAMA_HOST"):
        keeper.url()
    assert keeper.embedded is None


def test_how_a_process_ended_in_words():
    assert ended(-9) == "was killed by signal SIGKILL" and ended(1) == "exited with code 1"
    assert ended(None) == "stopped answering"


def test_the_sidebar_question_right_after_a_kill_gets_the_restarted_server(settings):
    """Killed a moment before a script run asks the server about itself (a dying process is reaped tens of
    ms later, so it still looks alive): the run waits for it to end, starts it again, and asks again,
    instead of showing "cannot reach" and leaving the question typed meanwhile unanswered (seen in CI)."""
    from utils.app.runtime import app_server, server_info

    keeper = app_server(settings)
    try:
        info = server_info(settings)
        first = keeper.pid
        os.kill(first, signal.SIGKILL)  # and at once, before it is reaped:
        again = server_info(settings)
        assert again.url == info.url and again.models == info.models
        assert keeper.pid not in (None, first)
        assert [r.why for r in keeper.restarts] == ["was killed by signal SIGKILL"]
    finally:
        if keeper.embedded:
            keeper.embedded.stop()

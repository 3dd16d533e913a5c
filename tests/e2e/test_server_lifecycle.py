"""The embedded server the app started dies (killed by its pid, as the kernel's OOM killer or a crash
would end it): the app keeps the conversation on screen, says what happened, starts the server again,
and the next question gets an answer, all without restarting the app."""

from __future__ import annotations

import os
import re
import signal

from playwright.sync_api import Page, expect

from tests.support.browser import RunningApp, embedded_server_pid
from tests.support.driving import (
    ANSWER_TIMEOUT,
    LONG_PROMPT,
    RERUN_TIMEOUT,
    SCRIPT_STATE,
    STANDARD_PROMPT,
    WATCH_STREAM,
    assistant_messages,
    open_app,
    send,
    set_number,
    set_switch,
    sidebar,
)


def test_killing_the_embedded_server_mid_answer_then_between_answers(page: Page, own_server_app: RunningApp):
    open_app(page, own_server_app.url)
    first_pid = embedded_server_pid(own_server_app)
    expect(sidebar(page).get_by_text(f"started by this app, pid {first_pid}")).to_be_visible()
    set_number(page, "Max tokens", 400)
    set_switch(page, "Speculative decoding", False)

    # Mid-answer: the server is killed while the answer streams.
    page.evaluate(WATCH_STREAM)
    box = page.get_by_test_id("stChatInput").locator("textarea")
    box.fill(LONG_PROMPT)
    box.press("Enter")
    page.wait_for_function("window.__stream.partials >= 3", timeout=ANSWER_TIMEOUT)
    os.kill(first_pid, signal.SIGKILL)

    broken = assistant_messages(page).last
    expect(broken).to_contain_text(re.compile(r"The embedded server this app started was killed by signal SIGKILL "
                                              r"while answering; the app started it again"), timeout=RERUN_TIMEOUT)
    page.wait_for_function(f"{SCRIPT_STATE} === 'notRunning'", timeout=RERUN_TIMEOUT)
    # The conversation stays: the question and the partial answer, with the input usable.
    expect(page.get_by_test_id("stChatMessage").first).to_contain_text(LONG_PROMPT)
    expect(broken).to_contain_text("partial text was kept")
    expect(box).to_be_enabled()
    second_pid = embedded_server_pid(own_server_app)
    assert second_pid != first_pid
    expect(sidebar(page).get_by_text(f"started by this app, pid {second_pid}")).to_be_visible()
    expect(sidebar(page).get_by_text(re.compile(r"was killed by signal SIGKILL at .*started it again \(1 restart"))
           ).to_be_visible()
    expect(page.get_by_text("unset OLLAMA_HOST")).to_have_count(0)  # no OLLAMA_HOST here: no such advice

    # The next question gets a whole answer from the restarted server.
    set_number(page, "Max tokens", 24)
    send(page, STANDARD_PROMPT)
    answer = assistant_messages(page).last
    expect(answer.get_by_test_id("stCaptionContainer").first).to_contain_text("standard: ")
    assert answer.get_by_test_id("stChatMessageContent").inner_text().strip()

    # Between answers: killed while idle, it is started again by the next run, before the question.
    os.kill(second_pid, signal.SIGKILL)
    send(page, STANDARD_PROMPT)
    expect(assistant_messages(page)).to_have_count(3)
    expect(assistant_messages(page).last.get_by_test_id("stCaptionContainer").first).to_contain_text("standard: ")
    third_pid = embedded_server_pid(own_server_app)
    assert third_pid not in (first_pid, second_pid)
    expect(sidebar(page).get_by_text(re.compile(r"started it again \(2 restarts so far\)"))).to_be_visible()
    expect(page.get_by_test_id("stChatMessage")).to_have_count(6)

"""Chat: answers stream as the target accepts them; every answer keeps its stats and is saved.

A question is saved and the page reruns; that run streams the answer with a Stop button and the chat
input disabled (nothing typed meanwhile is lost), saves it, stopped or not, and reruns again. Stop (or
any other widget) starts a new run while the streaming one is being stopped: the new run waits until
the stopped one has saved the partial answer, then shows it from the store. Regenerate, Edit and
resend, and the example prompts work the same way: their callbacks change the store and set
`streaming`, and the run they start streams the answer.
"""

import streamlit as st

from utils.app.answer_view import Answer, Streaming, show_message, stream_answer
from utils.app.asks import ask_kind, question, remember_answer
from utils.app.conversations import (
    ask,
    baseline_controls,
    chat_history,
    conversation_list,
    conversation_tools,
    edit_question,
    message_actions,
)
from utils.app.examples import INTRO, first_screen
from utils.app.preferences import Preferences
from utils.app.runtime import current, store
from utils.app.speed import remember_baseline
from utils.bench.first_asks import AGAIN

settings, server, choices = current()
usable = server is not None and choices is not None  # without, the conversations stay readable
conversations = store(settings)
streaming: Streaming | None = st.session_state.get("streaming")  # an answer asked for, or being generated
if streaming is not None and streaming.started:  # a run streams it, and this run interrupted that one
    streaming.wait()  # until it has saved what it had (an interrupted script cannot change session state)
    streaming = st.session_state.streaming = None

st.title("Chat")
st.caption(INTRO)
highlight = st.sidebar.toggle("Highlight accepted draft tokens", key="highlight",
                              value=Preferences(conversations).default("highlight", True))
if usable:
    baseline = baseline_controls(settings, server.url, choices.target)
else:
    baseline = None
    st.warning("No usable server or model just now (see the sidebar): the conversations stay readable, and "
               "questions can be asked again once the server answers.")
conversation = conversation_list(conversations)
conversation_id = conversation["id"] if conversation else None
if streaming is not None and (streaming.conversation_id != conversation_id or not usable):
    streaming = st.session_state.streaming = None  # that conversation is gone, or no server: nothing to answer
conversation_tools(conversations, conversation)

messages = conversations.messages(conversation_id) if conversation_id else []
last_answer = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
if not messages and streaming is None:
    first_screen(conversations, server.models if usable else [], enabled=usable)
editing = st.session_state.get("editing")
for index, message in enumerate(messages):
    if message["id"] == editing and streaming is None:
        edit_question(conversations, message, first=index == 0)
        continue
    show_message(message, highlight, charts=index == last_answer and streaming is None,
                 actions=lambda index=index: message_actions(conversations, messages, index,
                                                             enabled=streaming is None and usable))

# Disabled while an answer streams: a question cannot be typed, so none is lost (Stop ends the answer).
prompt = st.chat_input("Ask the target model something", key="prompt", disabled=streaming is not None or not usable)
if prompt and prompt.strip():  # a message of spaces alone is not sent
    ask(conversations, conversation_id, prompt)
    st.rerun()  # the next run streams the answer, with the input disabled

if streaming is not None:
    streaming.started = True
    answer = Answer()
    # Whether the drafter has answered this question before (suffix decoding then copies that answer):
    # decided before it streams and saved with it, so its speed-up is never shown as a first ask's.
    asked = question(messages)
    kind = ask_kind(server.url, choices.target, choices.drafter, asked) if choices.speculative else None
    try:
        with st.chat_message("assistant"):
            st.button("Stop", icon=":material/stop:", key="stop", help="stop the answer here; what it said is kept")
            request = choices.request(chat_history(messages), settings.engine)
            stream_answer(settings, server.url, choices, request, highlight=highlight, baseline=baseline,
                          answer=answer, asked_again=kind == AGAIN)
    except BaseException:  # Stop, or any rerun (a setting, another page) while it streamed
        answer.stop()
        raise
    finally:  # no Streamlit call in here: after Stop it would raise again
        conversations.add_message(conversation_id, "assistant", answer.text, pieces=answer.pieces,
                                  stats=answer.stats, note=answer.note, stopped=answer.stopped,
                                  thinking=answer.thinking, thinking_pieces=answer.thinking_pieces,
                                  baseline=baseline if choices.speculative else None, ask=kind)
        streaming.saved.set()
    st.session_state.streaming = None
    if answer.stats:
        remember_baseline(conversations, server.url, answer.stats, "last standard answer in Chat")
        remember_answer(server.url, choices.target, answer.stats, asked)  # the next answer to it is a repeat
    st.rerun()  # redraw from the store: the saved answer, its stats and charts

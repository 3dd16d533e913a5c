"""Chat: answers stream as the target accepts them; every answer keeps its stats and is saved."""

import streamlit as st

from utils.app.answer_view import show_message, stream_answer
from utils.app.conversations import baseline_controls, chat_history, conversation_controls
from utils.app.runtime import require_server, store
from utils.app.speed import remember_baseline

settings, server, choices = require_server()
conversations = store(settings)

st.title("Chat")
conversation_id = conversation_controls(conversations)
highlight = st.sidebar.toggle("Highlight accepted draft tokens", value=True, key="highlight")
baseline = baseline_controls(settings, server.url, choices.target)

messages = conversations.messages(conversation_id) if conversation_id else []
last_answer = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
for index, message in enumerate(messages):
    show_message(message, highlight, charts=index == last_answer)

if prompt := st.chat_input("Ask the target model something"):
    if conversation_id is None:
        conversation_id = st.session_state.conversation_id = conversations.create(prompt)
    elif not messages:
        conversations.rename(conversation_id, prompt)  # a new conversation is named by its first question
    conversations.add_message(conversation_id, "user", prompt)
    with st.chat_message("user"):
        st.markdown(prompt)
    request = choices.request(chat_history(messages) + [{"role": "user", "content": prompt}])
    with st.chat_message("assistant"):
        answer = stream_answer(settings, server.url, choices, request, highlight=highlight, baseline=baseline)
    conversations.add_message(conversation_id, "assistant", answer.text, pieces=answer.pieces, stats=answer.stats,
                              note=answer.note, baseline=baseline if choices.speculative else None)
    if answer.stats:
        remember_baseline(conversations, server.url, answer.stats, "last standard answer in Chat")
    st.rerun()  # redraw from the store: the saved answer, its stats and charts

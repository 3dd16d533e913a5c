"""Chat: answers stream as the target accepts them; every answer keeps its stats and is saved."""

import streamlit as st

from utils.app import ui

settings, server, choices = ui.require_server()
conversations = ui.store(settings)

st.title("Chat")
conversation_id = ui.conversation_controls(conversations)
highlight = st.sidebar.toggle("Highlight accepted draft tokens", value=True, key="highlight")
baseline = ui.baseline_controls(settings, server.url, choices.target)

messages = conversations.messages(conversation_id) if conversation_id else []
last_answer = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
for index, message in enumerate(messages):
    ui.show_message(message, highlight, charts=index == last_answer)

if prompt := st.chat_input("Ask the target model something"):
    if conversation_id is None:
        conversation_id = st.session_state.conversation_id = conversations.create(prompt)
    elif not messages:
        conversations.rename(conversation_id, prompt)  # a new conversation is named by its first question
    conversations.add_message(conversation_id, "user", prompt)
    with st.chat_message("user"):
        st.markdown(prompt)
    request = choices.request(ui.chat_history(messages) + [{"role": "user", "content": prompt}])
    with st.chat_message("assistant"):
        answer = ui.stream_answer(settings, server.url, choices, request, highlight=highlight, baseline=baseline)
    conversations.add_message(conversation_id, "assistant", answer.text, pieces=answer.pieces, stats=answer.stats,
                              note=answer.note, baseline=baseline if choices.speculative else None)
    if answer.stats:
        ui.remember_baseline(conversations, server.url, answer.stats, "last standard answer in Chat")
    st.rerun()  # redraw from the store: the saved answer, its stats and charts

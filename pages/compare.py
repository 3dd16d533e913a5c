"""Compare: the same prompt answered by standard and by speculative generation, side by side."""

import streamlit as st

from utils.app.compare import compare, show_comparison
from utils.app.runtime import require_server

settings, server, choices = require_server()

st.title("Compare")
st.caption(f"One prompt, answered by {choices.target} with standard generation and with speculative decoding, "
           "one after the other on the same server; the order alternates between runs so neither always "
           "benefits from a warm cache.")
if not choices.speculative:
    st.warning("Turn on speculative decoding and pick a usable drafter in the sidebar to compare.")
    st.stop()

prompt = st.text_area("Prompt", "Write a Python function that checks whether a number is prime.",
                      key="compare_prompt")
if st.button("Run both", type="primary", disabled=not prompt.strip()):
    st.session_state.compare_runs = st.session_state.get("compare_runs", 0) + 1
    standard_first = st.session_state.compare_runs % 2 == 1
    st.session_state.comparison = compare(settings, server.url, choices, prompt, standard_first)
    show_comparison(st.session_state.comparison, texts=False)
elif comparison := st.session_state.get("comparison"):
    show_comparison(comparison)

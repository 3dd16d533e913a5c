"""Compare: the same prompt answered by standard and by speculative generation, side by side."""

import streamlit as st

from utils.app.compare import compare, show_comparison
from utils.app.runtime import require_server

settings, server, choices = require_server()

st.title("Compare")
st.caption(f"One prompt, answered by {choices.target} with standard generation and with speculative decoding, "
           "one after the other on the same server. Repeats run more pairs, each in the other order from the "
           "one before, so both sides run as often first as second, and show the spread.")
if not choices.speculative:
    st.warning("Turn on speculative decoding and pick a usable drafter in the sidebar to compare.")
    st.stop()

prompt = st.text_area("Prompt", "Write a Python function that checks whether a number is prime.",
                      key="compare_prompt")
repeats = st.number_input("Pairs", 1, 10, 3, key="compare_repeats",
                          help="1: one pair, shown as it streams; more: that pair, then more pairs timed only")
if st.button("Run both", type="primary", disabled=not prompt.strip()):
    st.session_state.compare_runs = st.session_state.get("compare_runs", 0) + 1
    standard_first = st.session_state.compare_runs % 2 == 1
    st.session_state.comparison = compare(settings, server.url, choices, prompt, standard_first, int(repeats))
    st.rerun()  # drawn again from the session: the whole comparison, highlighted, at once
if comparison := st.session_state.get("comparison"):
    show_comparison(comparison)

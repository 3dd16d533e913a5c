"""Speculative decoding for Ollama: the Streamlit app. Run with `streamlit run app.py`.

This script runs on every interaction: it draws the shared sidebar (server and generation
settings), leaves them in st.session_state for the pages, then runs the page that is open.
"""

import streamlit as st

from config import get_settings
from utils.app import clipboard
from utils.app.sidebar import sidebar

st.set_page_config(page_title="Speculative decoding for Ollama", page_icon="⚡", layout="wide")

page = st.navigation([
    st.Page("pages/chat.py", title="Chat", icon=":material/chat:", default=True),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("pages/benchmarks.py", title="Benchmarks", icon=":material/speed:"),
    st.Page("pages/models.py", title="Models", icon=":material/deployed_code:"),
    st.Page("pages/proxy.py", title="Proxy", icon=":material/swap_horiz:"),
])
st.session_state.server, st.session_state.choices = sidebar(get_settings())
clipboard.install()  # what makes the answers' Copy buttons copy
page.run()

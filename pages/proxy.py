"""Proxy: the live traffic of a running speculative proxy (`python cli.py proxy`)."""

import httpx
import streamlit as st

from config import get_settings
from utils.app.proxy import default_url, recent_traffic, rows, totals, unreachable_text

settings = get_settings()
st.title("Proxy")
st.caption("Any Ollama client pointed at the proxy gets speculative answers where they apply; everything "
           "else goes to the Ollama behind it unchanged. Start one with `python cli.py proxy --upstream URL`.")
url = st.text_input("Proxy address", default_url(settings), key="proxy_url")


@st.fragment(run_every=2.0)
def traffic() -> None:
    try:
        report = recent_traffic(url, settings.api_key)
    except httpx.HTTPError as error:
        st.info(unreachable_text(url, error))
        return
    summary = totals(report["requests"])
    pairs = ", ".join(f"{target} ← {drafter}" for target, drafter in report["pairs"].items()) or "none"
    st.markdown(f"In front of **{report['upstream']}**. Speculating for: {pairs}.")
    left, middle, right = st.columns(3)
    left.metric("Requests (latest 200)", summary["requests"])
    middle.metric("Speculated / forwarded", f"{summary['speculative']} / {summary['forwarded']}")
    right.metric("Draft tokens accepted", "—" if summary["acceptance"] is None else f"{summary['acceptance']:.0%}")
    if report["requests"]:
        st.dataframe(rows(report["requests"]), hide_index=True, use_container_width=True)
    else:
        st.caption("No requests yet: point a client at this address.")


traffic()

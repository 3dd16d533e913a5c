"""Copy buttons: on every code block of an answer and on the whole answer.

The buttons are plain HTML inside the answer's sanitized `st.html` (model output never runs as
script): `data-copy-text` holds the text to copy, or, with none, the button copies the code block
beside it. One small script per page, the only HTML the app lets run JavaScript, and only its own,
listens for clicks on them (`install`).
"""

from __future__ import annotations

import html

import streamlit as st

BUTTON_STYLE = ("font: 12px sans-serif; padding: 2px 8px; border: 1px solid rgba(128, 128, 128, 0.35); "
                "border-radius: 4px; background: white; color: #31333f; cursor: pointer")
CODE_BUTTON_STYLE = f"position: absolute; top: 6px; right: 6px; opacity: 0.85; {BUTTON_STYLE}"

# Delegated, so buttons drawn after it (every rerun, every streamed answer) work; installed once a page.
# navigator.clipboard needs a secure context (localhost is one, a LAN address over http is not): there
# the copy goes through a selected textarea instead.
SCRIPT = """<script>
if (!window.__specCopy) {
  window.__specCopy = true;
  document.addEventListener('click', async (event) => {
    const button = event.target.closest('button.spec-copy');
    if (!button) return;
    const text = button.hasAttribute('data-copy-text') ? button.getAttribute('data-copy-text')
      : button.parentElement.querySelector('pre').textContent.replace(/\\n$/, '');
    let copied = false;
    try {
      await navigator.clipboard.writeText(text);
      copied = true;
    } catch (error) {
      const area = document.createElement('textarea');
      area.value = text;
      area.style.position = 'fixed';
      area.style.opacity = '0';
      document.body.appendChild(area);
      area.select();
      copied = document.execCommand('copy');
      area.remove();
    }
    const label = button.dataset.label || (button.dataset.label = button.textContent);
    button.textContent = copied ? 'Copied' : 'Copy failed';
    setTimeout(() => { button.textContent = label; }, 1500);
  });
}
</script>"""


def install(where=st.sidebar) -> None:
    """The click listener for every copy button on the page (drawn once per script run)."""
    where.html(SCRIPT, unsafe_allow_javascript=True)


def code_block(pre: str) -> str:
    """A rendered `<pre>` with a Copy button in its corner, which copies the block's text."""
    return (f'<div style="position: relative"><button class="spec-copy" style="{CODE_BUTTON_STYLE}" '
            f'title="copy this code">Copy</button>{pre}</div>')


def answer_button(text: str) -> str:
    """A button that copies `text` (an answer's Markdown, as the model wrote it)."""
    return (f'<div style="margin-top: 0.25em"><button class="spec-copy" style="{BUTTON_STYLE}" '
            f'data-copy-text="{html.escape(text, quote=True)}" title="copy the whole answer as Markdown">'
            'Copy answer</button></div>')

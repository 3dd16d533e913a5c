"""Benchmarks: run the benchmark suite on chosen models, see its plots and table, browse past runs."""

from pathlib import Path

import streamlit as st

from utils.app.benchmarks import (
    DEFAULT_PROMPTS_PER_CATEGORY,
    DEFAULT_REPEATS,
    SPEEDUP_MEANING,
    TABLE_COLUMNS,
    ProgressText,
    asks_text,
    estimate_panel,
    speedup_figure,
    summary_markdown,
    summary_table,
)
from utils.app.runtime import PROJECT_DIR, current, explain
from utils.app.sidebar import default_drafter
from utils.bench import report
from utils.bench import runner as bench
from utils.engine.drafters import model_free_drafters

settings, server, choices = current()

st.title("Benchmarks")
if server is not None and choices is not None:
    prompts_file = st.text_input("Prompt set (JSON lines, relative to the project folder)", "prompts/bench.jsonl",
                                 key="bench_prompts")
    prompts_path = PROJECT_DIR / prompts_file  # an absolute path stays as it is
    try:
        categories = sorted({p["category"] for p in bench.load_prompts(bench.BenchConfig(prompts_path, "", []))})
    except (OSError, ValueError) as error:
        st.error(f"Cannot read the prompt set: {error}. Give the path of a JSON-lines file of prompts.")
        st.stop()
    # Keyed by the prompt set: another set's categories start all chosen (not kept from the set before).
    chosen_categories = st.multiselect("Categories", categories, default=categories,
                                       key=f"bench_categories-{prompts_file}")
    target = st.selectbox("Target", server.models, index=server.models.index(choices.target), key="bench_target")
    drafters = st.multiselect("Drafters", [*model_free_drafters(), *server.models], key="bench_drafters",
                              default=[choices.drafter] if choices.speculative
                              else [default_drafter(settings, target, [*model_free_drafters(), *server.models])])
    left, middle, right, last = st.columns(4)
    limit = left.number_input("Prompts per category (0: all)", 0, 1000, DEFAULT_PROMPTS_PER_CATEGORY,
                              key="bench_limit")
    repeat = middle.number_input("Repeats", 1, 10, DEFAULT_REPEATS, key="bench_repeat",
                                 help="each answer again, alternating which configuration goes first; the "
                                      "spread of the repeats tells a real difference from noise")
    ks = right.multiselect("Draft lengths", ["auto", "2", "4", "6", "8"], default=["auto"], key="bench_ks")
    max_tokens = last.number_input("Max tokens per answer (0: as the prompt set says)", 0, 4096, 0,
                                   key="bench_max_tokens")
    # No out_dir: each run gets a new dated folder under the data folder, listed below. host: the app's
    # own server (or OLLAMA_HOST's), never a second embedded server of the benchmark's own.
    config = bench.BenchConfig(prompts_file=prompts_path, target=target, drafters=drafters, ks=ks, host=server.url,
                               repeat=int(repeat), limit=int(limit) or None, max_tokens=int(max_tokens) or None,
                               categories=chosen_categories)
    ready = bool(chosen_categories and drafters and ks)
    if ready:
        estimate_panel(settings, server.url, config)
    else:
        st.warning("Pick at least one category, one drafter and one draft length.")
    if st.button("Run benchmark", type="primary", disabled=not ready, key="bench_start"):
        bar, words = st.progress(0.0, text="Loading the models…"), ProgressText()
        try:
            folder = bench.run_bench(settings, config, progress=lambda done, total, label: bar.progress(
                done / total if total else 1.0, text=words(done, total, label)))
            bar.progress(1.0, text=words.saved())  # not "writing the report…" once it is written
            st.session_state.bench_run = str(folder)
            st.success(f"Benchmark saved in {folder}.")
        except Exception as error:  # noqa: BLE001 - a failed run must be a message, with what to do
            st.error(f"The benchmark stopped: {explain(error, settings)}")
else:
    st.info("Running a benchmark needs a server with models (see the sidebar); past runs are listed below.")

runs = bench.past_runs(settings)
if not runs:
    st.caption("No benchmark runs yet.")
    st.stop()
names = [str(path) for path in runs]
shown = st.session_state.get("bench_run")
chosen = st.selectbox("Run", names, index=names.index(shown) if shown in names else 0,
                      format_func=lambda path: Path(path).name)
run = bench.load_run(Path(chosen))
speedups, left_out = speedup_figure(run["summary"])
st.caption(SPEEDUP_MEANING)
if speedups is not None:
    st.plotly_chart(speedups, key="bench-speedup")
if left_out:
    st.caption("No speed-up drawn for: " + "; ".join(left_out) + ".")
for name, figure in report.figures(run).items():
    if name != "speedup":  # drawn above, where it was measured beyond noise only
        st.plotly_chart(figure, key=f"bench-{name}")
st.caption(asks_text(run["summary"]))
st.dataframe(summary_table(run["summary"]), hide_index=True, column_config=TABLE_COLUMNS)
with st.expander("The benchmark's full report"):
    st.markdown(run["report_md"])
st.download_button("Download the summary (Markdown)", summary_markdown(run), f"{Path(chosen).name}.md",
                   "text/markdown")

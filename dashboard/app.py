"""plancast dashboard: ``streamlit run dashboard/app.py -- RUN...`` (or ``plancast dashboard RUN...``).

Navigation wiring only: the sidebar run picker runs on every page, then the chosen page.
"""

from __future__ import annotations

import streamlit as st

from plancast.dashboard.app_pages.common import run_picker

st.set_page_config(page_title="plancast", page_icon=":material/timer:", layout="wide")

PAGES = [
    st.Page("app_pages/overview.py", title="Overview", icon=":material/summarize:", default=True),
    st.Page("app_pages/timeline.py", title="Timeline", icon=":material/view_timeline:"),
    st.Page("app_pages/breakdown.py", title="Breakdown", icon=":material/stacked_bar_chart:"),
    st.Page("app_pages/memory.py", title="Memory", icon=":material/memory:"),
    st.Page("app_pages/telemetry.py", title="Telemetry", icon=":material/monitor_heart:"),
    st.Page("app_pages/sweep.py", title="Sweep", icon=":material/scatter_plot:"),
    st.Page("app_pages/what_if.py", title="What-if", icon=":material/tune:"),
    st.Page("app_pages/decision.py", title="Decision", icon=":material/paid:"),
]

page = st.navigation(PAGES)
run_picker()
page.run()

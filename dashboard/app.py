"""The Streamlit script `ackscope dashboard` runs."""

from ackscope.dashboard.pages import main

main()

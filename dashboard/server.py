"""The dashboard's Streamlit server, as `ackscope dashboard` starts it (dashboard/launch.py): Streamlit's own
command line, in a process that has already imported the pages and what they use (pandas, plotly, Streamlit's
elements), so the first browser to arrive does not wait for those imports (0.9 s of its first view, measured
at 5,000 queues: docs/benchmarks.md). Each session's run of app.py then finds them imported."""

import ackscope.dashboard.pages  # noqa: F401  (imported for its side effect: the imports above, done once)
from streamlit.web.cli import main

if __name__ == "__main__":
    main(prog_name="streamlit")

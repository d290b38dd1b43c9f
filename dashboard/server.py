"""The dashboard's Streamlit server, as `ackscope dashboard` starts it (dashboard/launch.py): Streamlit's own
command line, in a process that has already imported the pages and what they use (pandas, plotly, Streamlit's
elements), so the first browser to arrive does not wait for those imports (0.9 s of its first view, measured
at 5,000 queues: docs/benchmarks.md). Each session's run of app.py then finds them imported."""

import ackscope.dashboard.pages  # noqa: F401  (imported for its side effect: the imports above, done once)
from streamlit import net_util
from streamlit.web.cli import main

# Headless on a wildcard address, Streamlit asks a public service (checkip.amazonaws.com) for this machine's
# external address: for its start banner, and to judge a browser's origin that matched nothing else. A tool
# beside a production broker does not call out (in a cluster it cannot, and waits out the timeouts): there is
# no external address to know.
net_util.get_external_ip = lambda: None

if __name__ == "__main__":
    main(prog_name="streamlit")

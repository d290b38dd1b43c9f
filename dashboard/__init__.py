"""The Streamlit UI for on-call diagnosis: what is wrong, who causes it, since when."""

# This folder is ackscope.dashboard; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.dashboard":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.dashboard")

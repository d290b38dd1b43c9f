"""The Streamlit UI for on-call diagnosis: what is wrong, who causes it, since when."""

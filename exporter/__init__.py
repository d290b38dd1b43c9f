# This folder is ackscope.exporter; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.exporter":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.exporter")

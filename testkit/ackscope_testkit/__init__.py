"""What only ackscope's tests and benchmarks use, never installed with ackscope nor put in its image
(scripts/setup.sh --test installs it beside ackscope):

cluster        private nodes joined into one cluster
cut_link       the link between nodes cut (nftables), for a partition
fault_proxy    a management API that hangs, answers garbage or fails on command
latency_relay  a TCP relay that holds what passes, for latency on a path
lossy_link     a test host in a network namespace whose link loses packets (nftables)
wire_capture   the probes' AMQP connection captured with tshark, to hold their timings to the wire's
spark_cluster  a standalone Spark cluster from the project's PySpark
soak           the exporter and its probes through a series of faults (tests/test_soak.py, bench/soak.py)
"""

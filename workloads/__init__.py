"""What ackscope runs against a broker for demos, drills and benchmarks, never in production by itself: a
private RabbitMQ node, client failure scenarios, and the publisher-strategies benchmark. (What only the tests and
bench/ use lives in testkit/, outside the package.)

private_broker      a node of its own (own name, free ports, own data dir): its life
node_files          its rabbitmq.conf, plugins, cookie and environment
rabbitmq_release    which RabbitMQ it runs: the machine's package or a Debian root's
ports               free ports on the loopback
scenarios           `ackscope scenario`: one workload per client failure mode
confirm_strategies  `ackscope bench confirms`: transactions, confirms, fire-and-forget side by side
"""

# This folder is ackscope.workloads; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.workloads":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.workloads")

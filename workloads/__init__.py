"""What ackscope runs against a broker for demos, drills, tests and benchmarks, never in production by
itself: a private RabbitMQ node, client failure scenarios, and the publisher-strategies benchmark.

private_broker      a node of its own (own name, free ports, own data dir) from Debian's rabbitmq-server
scenarios           `ackscope scenario`: one workload per client failure mode
confirm_strategies  `ackscope bench confirms`: transactions, confirms, fire-and-forget side by side
"""

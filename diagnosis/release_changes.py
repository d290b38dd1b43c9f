"""The one table of what a RabbitMQ release changes for the clients of a broker that moves to it: from which
release, what changes, how ackscope sees whom it meets, what to do, where the fact comes from, and the test that
proves it on the release that changes it. `ackscope upgrade-check` predicts from it (diagnosis/upgrade.py), the
rules that differ by release read it (cluster.py: mirroring), and docs/upgrade.md's table is generated from it
(python -m ackscope.apps.reference upgrade)."""

from __future__ import annotations

from dataclasses import dataclass

from .context import Rule

# What a change does to the client it meets: the severity of its prediction, and its exit code.
REFUSED = "refused"  # a declare, a policy or a connection the release refuses: the application fails at start
LOSES = "loses messages"  # the release drops messages the client's broker keeps today
BEHAVES = "behaves differently"  # accepted, but not as today
DEPRECATED = "deprecated"  # accepted, and said to be refused by a later release
SEVERITY = {REFUSED: "critical", LOSES: "critical", BEHAVES: "warning", DEPRECATED: "warning"}

# The releases ackscope predicts for: those of the suite's matrix, measured on each (docs/versions.md). The newest
# is the newest 4.x of the matrix (Debian unstable's today).
TARGETS = {"4.0": (4, 0), "4.3": (4, 3)}
NEWEST = "4.3"


@dataclass(frozen=True)
class Change:
    id: str  # the prediction's rule id: a contract, like a rule's
    release: tuple[int, int]  # the first release that makes the change
    effect: str  # REFUSED | LOSES | BEHAVES | DEPRECATED
    what: str
    detected: str  # what of today's broker shows whom it meets
    remedy: str
    source: str  # the release notes, a measurement of the suite, or both
    proof: str  # the test that shows it on the release that changes it
    feature: str = ""  # the deprecated feature it is, as /api/deprecated-features names it
    # Judged at every target, whatever release the broker runs: what it holds against the target's own table.
    every_target: bool = False

    @property
    def severity(self) -> str:
        return SEVERITY[self.effect]

    @property
    def rule(self) -> Rule:
        """The change as a rule, whose findings it makes: its id, meaning and remedy."""
        return Rule(self.id, self.what, self.remedy, lambda ctx, rule: ())

    @property
    def release_name(self) -> str:
        return f"{self.release[0]}.{self.release[1]}"


PROOF = "tests/test_upgrade_check.py::test_on_the_target_release_each_predicted_change_happens"
POISON = "tests/test_versions.py::test_a_poison_message_in_a_default_quorum_queue_meets_the_release_s_delivery_limit"

CHANGES: tuple[Change, ...] = (
    Change("classic-queue-mirroring-removed", (4, 0), REFUSED,
           "Classic queue mirroring is removed: a policy with ha-* keys is refused when declared ('are not "
           "recognised policy settings'), so a definitions import or a deployment that sets one fails; where one "
           "exists, its ha-* keys have no effect and the queues it matches keep one replica.",
           "policies and operator policies whose definition has ha-* keys; the queues their pattern matches and "
           "those queues' consumers",
           "Move the queues that need replication to quorum queues (RabbitMQ guide 'Migrate your RabbitMQ Mirrored "
           "Classic Queues to Quorum Queues'); remove the ha-* keys from the policies before the upgrade.",
           "release notes 4.0.0; measured on 4.0.5 and 4.3.6 (HTTP 400)", PROOF, "classic_queue_mirroring"),
    Change("quorum-delivery-limit", (4, 0), LOSES,
           "Quorum queues get a delivery limit of 20: a message delivered 20 times is dead-lettered, or dropped "
           "where the queue has no dead-letter exchange. From 4.3 only basic.reject(requeue) and a consumer that "
           "goes away count towards it, basic.nack(requeue) does not.",
           "quorum queues without a delivery limit of their own; those whose consumers requeue (redeliveries "
           "counted) and that have no dead-letter exchange lose messages",
           "Give the queue a dead-letter exchange (a dead-letter-exchange policy), or set its delivery limit (the "
           "delivery-limit policy; -1 disables it, against the RabbitMQ team's advice); fix the consumers that "
           "requeue what they cannot process.",
           "release notes 4.0.0 and 4.3.0; measured on 4.0.5 (30 messages nacked: all dropped) and 4.3.6 (nack "
           "loops forever, reject drops)",
           POISON),
    Change("delivery-limit-ignores-nack", (4, 3), BEHAVES,
           "A quorum queue's delivery limit counts basic.reject(requeue), not basic.nack(requeue): a nack loop that "
           "4.0 ended at the limit goes on forever.",
           "quorum queues with a delivery limit whose messages are redelivered (on a broker already at 4.0 or "
           "later; from 3.x, quorum-delivery-limit says it)",
           "Make the consumers reject a message they cannot process without requeue (to a dead-letter exchange), "
           "or reject it with requeue so that the limit applies.",
           "release notes 4.3.0; measured on 4.3.6 (12,000+ redeliveries, nothing dropped)",
           POISON),
    Change("global-qos-per-consumer", (4, 3), BEHAVES,
           "basic.qos(global=true) (global_qos, denied_by_default) is accepted and applied per consumer: a channel "
           "with N consumers may hold N times its global prefetch unacked.",
           "channels with a global prefetch (the API shows it on 3.x only) and their consumers",
           "Set the prefetch per consumer (basic.qos(global=false), Celery's worker_prefetch_multiplier applies "
           "per worker) at the value each consumer should hold.",
           "release notes 4.3.0 (denied_by_default); measured on 4.3.6 (accepted, each consumer shows the "
           "prefetch)", PROOF, "global_qos"),
    Change("transient-nonexclusive-queue", (4, 0), DEPRECATED,
           "Non-durable, non-exclusive queues (transient_nonexcl_queues) are deprecated: listed in "
           "/api/deprecated-features/used; release notes 4.3.0 deny them by default, yet 4.3.6 accepts them "
           "(permitted_by_default, measured): a later release refuses the declare.",
           "queues neither durable nor exclusive, and their consumers",
           "Declare the queue durable, or exclusive to its connection, or durable with a queue TTL (x-expires) "
           "where it should go away by itself.",
           "release notes 4.0.0 and 4.3.0; measured on 4.0.5 and 4.3.6 (accepted, listed as in use)", PROOF,
           "transient_nonexcl_queues"),
    Change("consumer-timeout-argument-on-classic-queue", (4, 3), REFUSED,
           "A classic queue declared with x-consumer-timeout is refused: PRECONDITION_FAILED - invalid arg "
           "'x-consumer-timeout' ... of queue type rabbit_classic_queue. The application that declares it fails "
           "at start (rabbitmq-server#17144, from 4.3.2).",
           "classic queues with an x-consumer-timeout argument, and their consumers (likely who declare them)",
           "Declare the queue without the argument (4.3 applies no consumer timeout to classic queues), or move it "
           "to a quorum queue, where x-consumer-timeout is accepted.",
           "measured on 4.3.6 (406 on declare)", PROOF),
    Change("classic-queue-version-1", (4, 3), REFUSED,
           "CQv1 is removed: a queue declared with x-queue-version 1 is refused (PRECONDITION_FAILED - invalid arg "
           "'x-queue-version': unsupported queue version '1').",
           "classic queues with the argument x-queue-version 1, and their consumers",
           "Declare the queue without x-queue-version (version 2 is the only one).",
           "release notes 4.3.0; measured on 4.3.6 (406 on declare; x-queue-mode, which the notes name too, was "
           "accepted)", PROOF),
    Change("queue-master-locator", (4, 3), REFUSED,
           "queue_master_locator is denied by default: declaring a queue with x-queue-master-locator closes the "
           "client's whole connection (541 INTERNAL_ERROR - Feature `queue_master_locator` is deprecated).",
           "queues with an x-queue-master-locator argument, and their consumers",
           "Declare the queue with x-queue-leader-locator instead (client-local or balanced), or set the "
           "queue-leader-locator policy.",
           "release notes 4.0.0 (deprecated) and 4.3.0 (denied_by_default); measured on 4.3.6 (connection closed "
           "with 541)", PROOF, "queue_master_locator"),
    Change("classic-queue-consumer-timeout-ignored", (4, 3), BEHAVES,
           "Consumer timeouts are no longer evaluated for classic queues (nor streams): a consumer that stops "
           "acking holds its deliveries until its connection closes, where today the broker closes its channel "
           "at the timeout and requeues them.",
           "classic queues with consumers that ack manually: a warning for each that relies on the timeout (it "
           "sets its own, x-consumer-timeout or a consumer-timeout policy, or the broker's log told of a consumer "
           "timed out on it in the window); the others, where a healthy client loses only a safety net, one info "
           "finding for the broker that counts them and names the first",
           "Watch for stalled consumers (consumer-stalled); where the broker should take deliveries back by itself, "
           "move the queue to a quorum queue, which keeps the consumer timeout.",
           "release notes 4.3.0; measured on 4.3.6 (a stalled consumer on a classic queue kept its deliveries "
           "past the timeout); RabbitMQ's main branch restores classic queue consumer timeouts for 4.4 (not "
           "released)",
           "tests/test_breaks.py::test_a_celery_acks_late_task_that_hangs_is_stalled_then_timed_out_but_not_on_4_3s_"
           "classic_queue"),
    Change("management-metrics-collection", (4, 0), DEPRECATED,
           "The management plugin's statistics (the message rates and per-object counters of the HTTP API and the "
           "UI) are deprecated from 4.0 (management_metrics_collection), to be removed by a later release: what "
           "reads them, dashboards, scripts, monitoring, loses its numbers there.",
           "the broker collects them today (/api/overview's disable_stats is false)",
           "Read the broker's Prometheus plugin instead (rabbitmq_prometheus; ackscope reads it with --source "
           "prometheus), then turn the statistics off: management_agent.disable_metrics_collector = true.",
           "RabbitMQ's 4.0 deprecation announcements; its phase measured on 4.0.5 and 4.3.6 (permitted_by_default; "
           "the broker never lists it as used)", PROOF, "management_metrics_collection"),
    Change("ram-node-type", (4, 0), DEPRECATED,
           "RAM nodes are deprecated from 4.0 and removed by 4.3 (ram_node_type): a node that keeps the cluster's "
           "metadata in memory only cannot run there.",
           "the nodes /api/nodes lists with type ram",
           "Before the upgrade, make each ram node a disc node: rabbitmqctl stop_app; rabbitmqctl "
           "change_cluster_node_type disc; rabbitmqctl start_app (one node at a time).",
           "release notes 4.0.0 (deprecated); ram_node_type's phase measured on 4.0.5 (permitted_by_default) and "
           "4.3.6 (removed)", PROOF, "ram_node_type"),
    Change("deprecated-feature-in-use", (4, 0), DEPRECATED,
           "A deprecated feature the broker says is in use (/api/deprecated-features/used, 3.13 and later) that no "
           "other change names: refused where the target release denies or removed it.",
           "the broker's own list of deprecated features in use, against the phase each has on the target release "
           "(measured)",
           "Follow the feature's doc_url: stop using it before the release that denies it.",
           "the broker's /api/deprecated-features/used; the target's phases measured on 4.0.5 and 4.3.6", PROOF,
           every_target=True),
)

# Each deprecated feature's phase on the releases of the matrix, as /api/deprecated-features said (4.0.5, 4.3.6).
PHASES = {
    (4, 0): {"queue_master_locator": "permitted_by_default", "management_metrics_collection": "permitted_by_default",
             "global_qos": "permitted_by_default", "ram_node_type": "permitted_by_default",
             "transient_nonexcl_queues": "permitted_by_default", "amqp_address_v1": "permitted_by_default",
             "classic_queue_mirroring": "removed"},
    (4, 3): {"queue_master_locator": "denied_by_default", "global_qos": "denied_by_default",
             "amqp_filter_set_bug": "denied_by_default", "amqp_address_v1": "denied_by_default",
             "management_metrics_collection": "permitted_by_default",
             "transient_nonexcl_queues": "permitted_by_default", "classic_queue_mirroring": "removed",
             "ram_node_type": "removed"},
}


def change(change_id: str) -> Change:
    return next(c for c in CHANGES if c.id == change_id)

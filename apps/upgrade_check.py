"""`ackscope upgrade-check --to 4.0|4.3|newest`: before an upgrade, what the target release changes for each
client and object of the running broker, worst first: what it will refuse (at declare, at start), where it will
lose messages, what will behave differently, each with its evidence, the release that changes it, where the rule
comes from and what to do. The changes are the table of diagnosis/release_changes.py (docs/upgrade.md).

Exit codes as `diagnose`'s (the Nagios convention): 2 something will be refused or lose messages, 1 a change in
behaviour or a deprecation, 0 nothing; 3 when it cannot say: the broker unreachable, a target it has no rules for,
or changes it could not judge while it found nothing else (what was not read is never taken for nothing to change).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping

from ackscope.core import config
from ackscope.diagnosis.release_changes import NEWEST, TARGETS
from ackscope.diagnosis.upgrade import Prediction, predict
from ackscope.model.findings import Diagnosis
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import SourceFailed

from .diagnose import OK, OPTIONS, SOURCES, UNREACHABLE, connect, exit_code, print_report

UNKNOWN = 3  # the Nagios convention's UNKNOWN: ackscope cannot say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", required=True, metavar="RELEASE",
                        help=f"the release to move to: {', '.join(TARGETS)} or newest ({NEWEST})")
    parser.add_argument("--config", metavar="FILE", help="TOML file: [exporter] for the connection "
                        "[env ACKSCOPE_CONFIG]")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="[text]")
    config.add_arguments(parser, OPTIONS)


def target_of(name: str) -> tuple[int, int] | None:
    return TARGETS.get(NEWEST if name == "newest" else name)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    target = target_of(args.to)
    if target is None:
        print(f"ackscope upgrade-check: no rules for RabbitMQ {args.to}: ackscope predicts for "
              f"{', '.join(TARGETS)} (newest: {NEWEST}), the releases it measures", file=sys.stderr)
        return UNKNOWN
    source = connect(args, environ, upgrade_facts=True).source
    try:
        snapshot = source.read()
    except SourceFailed as e:
        print(f"ackscope upgrade-check: cannot read {source.base_url}: {e}", file=sys.stderr)
        return UNREACHABLE
    finally:
        source.close()
    prediction = predict(snapshot, target)
    where = f"{source.base_url} ({SOURCES[source.name]})"
    if args.format == "json":
        print(json.dumps(_document(prediction, snapshot, args.to), indent=2))
    else:
        print_report(Diagnosis(prediction.findings, prediction.not_evaluated), _headline(prediction, snapshot, where),
                     _nothing(prediction))
        for u in snapshot.unread:
            print(f"not read: {u.message}")
    return _exit(prediction)


def _exit(p: Prediction) -> int:
    if not p.findings and p.not_evaluated:
        return UNKNOWN
    return exit_code(list(p.findings)) if p.findings else OK


def _release(r: tuple[int, int] | None) -> str:
    return "an unknown release" if r is None else f"{r[0]}.{r[1]}"


def _headline(p: Prediction, s: Snapshot, where: str) -> str:
    version = s.overview.rabbitmq_version or "of a version it does not say"
    if p.at_or_past_target:
        return (f"{where}: RabbitMQ {version} is already at or past {_release(p.target)}: the target is older, "
                "nothing to predict")
    return (f"{where}: RabbitMQ {version} → {_release(p.target)}: {len(p.changes)} change(s) between them checked"
            + ("" if p.current is not None else " (every change up to the target: the broker's release is unknown)"))


def _nothing(p: Prediction) -> str:
    if p.at_or_past_target:
        return "nothing to change"
    return "some changes could not be judged: see below" if p.not_evaluated else "nothing this upgrade changes meets a client"


def _document(p: Prediction, s: Snapshot, asked: str) -> dict:
    return {"broker": {"rabbitmq_version": s.overview.rabbitmq_version, "cluster_name": s.overview.cluster_name,
                       "release": _release(p.current)},
            "target": {"asked": asked, "release": _release(p.target)},
            "newer_than_target": p.at_or_past_target,
            "changes_checked": [c.id for c in p.changes],
            "findings": [f.to_json() for f in p.findings],
            "not_evaluated": [n.to_json() for n in p.not_evaluated],
            "unread": [{"endpoint": u.endpoint, "reason": u.reason, "message": u.message} for u in s.unread]}

"""The probes as one service, as the exporter, `ackscope probe` and `ackscope diagnose` run them: the
runner, the statistics it keeps and, with a data dir, its event log."""

from __future__ import annotations

from ackscope.model.probes import ProbeStats

from .config import ProbeConfig
from .events import EventLog
from .runner import ProbeRunner
from .statistics import ProbeStatistics


class Probes:
    def __init__(self, cfg: ProbeConfig):
        self.cfg = cfg
        self.statistics = ProbeStatistics(cfg.targets)
        self.events = EventLog(cfg.data_dir) if cfg.data_dir else None
        self.runner = ProbeRunner(cfg.entries, cfg.targets, self.statistics, cfg.settings, self.events)

    def stats(self) -> ProbeStats:
        return self.statistics.snapshot()

    def start(self) -> None:
        self.runner.start()

    def stop(self) -> None:
        self.runner.stop()

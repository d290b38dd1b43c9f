"""`ackscope pipeline --master spark://…` on a real standalone cluster (a master and two one-core workers from the
project's PySpark): the same reports as local mode, the work done in the workers' executors, a worker lost
mid-run survived, and a cluster that cannot run the job said in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import wait_for
from pipeline_builders import Log, read_reports, traced, write_events, write_snapshots, write_traces

from ackscope.workloads.ports import free_port
from ackscope_testkit.spark_cluster import StandaloneCluster

ACKSCOPE = str(Path(sys.executable).with_name("ackscope"))
# What a cluster run needs beyond --master: the executors' Python (one with pyarrow; ackscope need not be
# installed there) and executors that fit a 1 GiB worker.
CLUSTER_CONF = ("--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.executor.memory=512m")


def _history(data: Path) -> None:
    """Three runs of 400 messages over two days, each with one lost and one delivered twice; a consumer at its
    prefetch limit in half its samples; a queue whose deliveries are a third redeliveries."""
    for r, day in enumerate((0, 0, 86_400)):
        log = Log(run_id=f"run{r}", probe="quorum-persistent", queue_type="quorum")
        for seq in range(1, 401):
            log.happy(seq, day + seq * 0.5)
        log.add(401, "published", day + 201).add(401, "confirmed", day + 201.01, 0.01, batch_size=1)
        log.add(7, "delivered", day + 260, redelivered=True)
        log.happy(402, day + 500)
        write_events(data, log, name=f"part-{r:06d}.parquet")
    channels = [{"taken_at": t, "vhost": "/", "channel": "c (1)", "connection_name": "worker", "user": "app",
                 "prefetch_limit": 10, "messages_unacked": 10 if t % 60 else 4, "consumer_count": 1,
                 "confirm": True, "transactional": False, "published_total": t, "client": "pika 1.3.2",
                 "identity": "worker"} for t in range(0, 600, 30)]
    write_snapshots(data, "channels", channels)
    queues = [{"taken_at": t, "vhost": "/", "queue": "jobs", "type": "quorum", "durable": True,
               "delivered_total": 3 * t, "redelivered_total": t} for t in range(0, 600, 30)]
    write_snapshots(data, "queues", queues)
    # The applications' traced messages: 300 a day over two days, each day's 150th never delivered.
    for day in (0, 86_400):
        write_traces(data, [traced(day + n, None if n == 150 else day + n + 0.5) for n in range(300)],
                     name=f"part-{day:06d}.parquet")


def _pipeline(data: Path, out: Path, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([ACKSCOPE, "pipeline", "--data-dir", str(data), "--out", str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or os.environ, **kw)


def _finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """The input, for the tests that fail before reading it (they run beside the cluster's group, which then need
    not run the local answer twice: a pipeline run in a JVM of its own took 200 s of a loaded suite)."""
    data = tmp_path_factory.mktemp("cluster-input")
    _history(data)
    return data


@pytest.fixture(scope="module")
def local_reports(history, tmp_path_factory, java) -> tuple[Path, dict]:
    """The known answer: the same input run in local mode."""
    data = history
    out = tmp_path_factory.mktemp("local-out")
    code, err = _finish(_pipeline(data, out))
    assert code == 0, err
    return data, read_reports(out)


def test_a_standalone_cluster_writes_the_reports_local_mode_writes_with_the_work_in_its_executors(
        spark_cluster, local_reports, tmp_path):
    data, expected = local_reports
    audit = {r["run_id"]: r for r in expected["delivery_audit"]}
    assert [audit[r]["lost"] for r in sorted(audit)] == [1, 1, 1]  # the known answer is the one built in
    assert all(audit[r]["duplicates"] == 1 and audit[r]["delivered"] == 401 for r in audit)
    [traced_audit] = expected["trace_audit"]
    assert (traced_audit["published"], traced_audit["unprocessed"]) == (600, 2)
    before = {a["id"] for a in spark_cluster.state().get("completedapps", [])}
    code, err = _finish(_pipeline(data, tmp_path / "out", "--master", spark_cluster.master_url, *CLUSTER_CONF))
    assert code == 0, err
    assert read_reports(tmp_path / "out") == expected
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["spark"]["master"] == spark_cluster.master_url and summary["files_skipped"] == 0
    # The master's record of the application, and each worker's executor log of it: the work ran there.
    apps = [a for a in spark_cluster.state()["completedapps"] if a["id"] not in before]
    assert [(a["name"], a["state"]) for a in apps] == [("ackscope-pipeline", "FINISHED")], apps
    logs = [p for p in spark_cluster.executor_logs() if apps[0]["id"] in str(p)]
    assert {p.parts[-4] for p in logs} == {"worker-0", "worker-1"}, logs
    # A worker copies its executor's output into the log by a thread of its own, which may lag the app's end.
    finished: dict[str, int] = {}

    def each_ran_a_task() -> bool:
        finished.update({p.parts[-4]: p.read_text().count("Finished task") for p in logs})
        return all(n > 0 for n in finished.values())
    wait_for(each_ran_a_task, 30, lambda: f"a finished task in each executor's log (last seen: {finished})")


def test_a_worker_lost_mid_run_is_retried_by_spark_and_the_reports_are_still_right(spark_cluster, local_reports,
                                                                                    tmp_path):
    data, expected = local_reports
    run = _pipeline(data, tmp_path / "out", "--master", spark_cluster.master_url, *CLUSTER_CONF)
    stages: list[str] = []
    reader = threading.Thread(target=lambda: stages.extend(run.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 600  # beside the suite's other workers, reading the inputs took over 5 minutes
    lost = None
    try:
        # Once the inputs are read and the first report is being written, the executors hold shuffle files: lose
        # one.
        while not any(line.startswith("  delivery_audit") for line in stages):
            assert run.poll() is None and time.monotonic() < deadline, "".join(stages)
            time.sleep(0.05)
        lost = spark_cluster.started[0]
        spark_cluster.kill_worker(lost)
        assert run.wait(600) == 0, "".join(stages)
        reader.join(5)
        assert read_reports(tmp_path / "out") == expected
        # Spark says the loss in one line of its own, and nothing else of it reaches the user.
        errors = [line for line in stages if "ERROR" in line]
        assert len(errors) == 1 and "Lost executor" in errors[0] and "worker lost" in errors[0], "".join(stages)
        assert not [line for line in stages if "Traceback" in line or line.startswith("\tat ")], "".join(stages)
    finally:
        run.kill()  # a run left behind holds the cluster's cores: the tests after this one would get no executor
        if lost is not None:
            spark_cluster.started.remove(lost)
            spark_cluster.add_worker(0)  # for the tests after this one


def test_a_master_that_cannot_be_reached_is_one_line(history, tmp_path):
    data = history
    master = f"spark://127.0.0.1:{free_port()}"
    started = time.monotonic()
    code, err = _finish(_pipeline(data, tmp_path / "out", "--master", master))
    assert code == 1 and time.monotonic() - started < 30
    assert err.strip() == f"ackscope pipeline: cannot reach the Spark master at {master}: Connection refused"


def test_a_master_without_workers_is_one_line_not_a_wait(java, history, tmp_path):
    data = history
    with StandaloneCluster(tmp_path / "empty", workers=0) as empty:
        code, err = _finish(_pipeline(data, tmp_path / "out", "--master", empty.master_url, "--executor-wait", "10",
                                      *CLUSTER_CONF))
    assert code == 1
    assert err.strip() == (f"ackscope pipeline: the Spark master at {empty.master_url} gave this run no executor "
                           "within 10 s: it has no alive worker with the cores and memory asked for "
                           "(spark.executor.memory, spark.executor.cores)")


def test_executors_without_pyarrow_are_named_before_any_file_is_checked(spark_cluster, history, tmp_path):
    data = history
    bare = "/usr/bin/python3"  # Debian's, without the venv's pyarrow
    assert subprocess.run([bare, "-c", "import pyarrow"], capture_output=True).returncode != 0
    code, err = _finish(_pipeline(data, tmp_path / "out", "--master", spark_cluster.master_url,
                                  "--conf", f"spark.pyspark.python={bare}", "--conf", "spark.executor.memory=512m"))
    assert code == 1
    assert err.strip() == ("ackscope pipeline: the executors' Python has no pyarrow (install it there, or point "
                           "spark.pyspark.python at a Python that has it)")

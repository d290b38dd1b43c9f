"""Options: command line over environment over TOML over defaults; passwords only from env or files."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import cli_args

from ackscope.apps.exporter import load
from ackscope.core import amqp
from ackscope.core.config import ConfigError
from ackscope.core.secret import Secret


def _toml(tmp_path, text: str) -> str:
    path = tmp_path / "ackscope.toml"
    path.write_text(text)
    return str(path)


def test_command_line_beats_environment_beats_toml_beats_default(tmp_path):
    path = _toml(tmp_path, '[exporter]\ninterval = 30\ntimeout = 7\nmanagement_url = "http://toml:15672"\n')
    env = {"ACKSCOPE_INTERVAL": "20", "ACKSCOPE_MANAGEMENT_URL": "http://env:15672", "ACKSCOPE_PASSWORD": "p"}
    cfg = load(cli_args(config=path, interval="5"), env)
    assert cfg.interval == 5.0  # command line
    assert cfg.management_url == "http://env:15672"  # environment
    assert cfg.timeout == 7.0  # TOML
    assert cfg.listen == ("0.0.0.0", 9577)  # default
    assert cfg.deadline == 3 * cfg.interval  # a slow poll is late, not down
    assert cfg.verify is True, "TLS verification is on unless turned off"


def test_a_clusters_prometheus_plugins_are_one_url_per_node_comma_separated_or_a_toml_list(tmp_path):
    cfg = load(cli_args(prometheus_url="http://a:15692, http://b:15692/,"), {})
    assert cfg.prometheus_url == ("http://a:15692", "http://b:15692")
    path = _toml(tmp_path, '[exporter]\nprometheus_url = ["http://a:15692", "http://c:15692"]\n')
    assert load(cli_args(config=path), {}).prometheus_url == ("http://a:15692", "http://c:15692")
    assert load(cli_args(), {}).prometheus_url is None  # where the broker's listeners say


def test_password_comes_from_env_or_file_and_never_shows(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("from-a-file\n")
    cfg = load(cli_args(username="watcher"), {"ACKSCOPE_PASSWORD_FILE": str(secret)})
    assert cfg.password.reveal() == "from-a-file"
    assert "from-a-file" not in repr(cfg)
    cfg = load(cli_args(username="watcher"), {"ACKSCOPE_PASSWORD": "from-env"})
    assert cfg.password.reveal() == "from-env"


def test_no_password_for_a_named_user_is_a_clear_error():
    with pytest.raises(ConfigError, match="no password for user 'watcher'.*ACKSCOPE_PASSWORD"):
        load(cli_args(username="watcher"), {})


def test_no_credentials_are_guests_on_loopback_only_where_the_brokers_default_account_answers():
    for url in ("http://localhost:15672", "http://127.0.0.1:15672", "http://[::1]:15672"):
        assert load(cli_args(management_url=url), {}).password.reveal() == "guest"
    with pytest.raises(ConfigError, match=r"^no credentials for http://rabbitmq:15672: RabbitMQ's guest account "
                                          r"answers on loopback only; set ACKSCOPE_USERNAME and ACKSCOPE_PASSWORD"):
        load(cli_args(management_url="http://rabbitmq:15672"), {})


def test_password_written_in_the_toml_file_is_refused(tmp_path):
    path = _toml(tmp_path, '[exporter]\npassword = "plain"\n')
    with pytest.raises(ConfigError, match="'password' may not be written in the config file") as e:
        load(cli_args(config=path), {})
    assert "plain" not in str(e.value)


def test_command_line_has_no_password_option():
    out = subprocess.run([sys.executable, "-m", "ackscope", "exporter", "--password", "x"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "unrecognized arguments: --password" in out.stderr


@pytest.mark.parametrize("args,env,message", [
    ({"interval": "0"}, {}, "--interval: must be a positive number"),
    ({"listen": "nowhere"}, {}, "--listen: must be HOST:PORT"),
    ({}, {"ACKSCOPE_INCLUDE_QUEUES": "("}, "ACKSCOPE_INCLUDE_QUEUES: missing \\)"),
    ({"ca_file": "/no/such/ca.pem"}, {}, "--ca-file: no such file"),
    ({"web_username": "prom"}, {}, "--web-username needs ACKSCOPE_WEB_PASSWORD"),
    ({}, {"ACKSCOPE_PASSWORD_FILE": "/no/such/file"}, "ACKSCOPE_PASSWORD_FILE: cannot read /no/such/file"),
    ({}, {"ACKSCOPE_MAX_QUEUES": "1.5"}, "ACKSCOPE_MAX_QUEUES: must be a positive whole number"),
    ({"prometheus_url": "http://a:15692,ftp://b"}, {}, "--prometheus-url: must look like http"),
    ({"prometheus_url": " , "}, {}, "--prometheus-url: must name at least one"),
    ({}, {"ACKSCOPE_PROMETHEUS_URL": "http://u:secret@a:15692"}, "ACKSCOPE_PROMETHEUS_URL: must not carry credentials"),
])
def test_bad_settings_name_the_setting(args, env, message):
    with pytest.raises(ConfigError, match=message):
        load(cli_args(**args), env)


def test_unknown_or_invalid_toml_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting 'intervall'"):
        load(cli_args(config=_toml(tmp_path, "[exporter]\nintervall = 3\n")), {})
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load(cli_args(config=_toml(tmp_path, "[exporter\n")), {})
    with pytest.raises(ConfigError, match="cannot read"):
        load(cli_args(config=str(tmp_path / "missing.toml")), {})


def test_cli_reports_config_errors_in_one_line_without_traceback():
    out = subprocess.run([sys.executable, "-m", "ackscope", "exporter", "--interval", "-1"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == "ackscope exporter: --interval: must be a positive number of seconds, not '-1'"


def test_probe_targets_and_settings_come_from_the_toml_probe_table(tmp_path):
    path = _toml(tmp_path, '[probe]\namqp_url = "amqp://prober@rabbit:5672/%2F"\nrate = 2\nloss_deadline = 60\n'
                           '[[probe.targets]]\nname = "orders"\nqueue_type = "quorum"\nrate = 20\n'
                           '[[probe.targets]]\nname = "events"\nqueue_type = "stream"\n')
    cfg = load(cli_args(config=path), {"ACKSCOPE_AMQP_PASSWORD": "probe-pw"})
    probes = cfg.probes
    assert [(t.name, t.queue_type, t.rate) for t in probes.targets] == [("orders", "quorum", 20.0),
                                                                        ("events", "stream", 2.0)]
    assert probes.settings.loss_deadline == 60.0
    assert [e.url.reveal() for e in probes.entries] == ["amqp://prober:probe-pw@rabbit:5672/%2F"]
    assert "probe-pw" not in repr(probes) and probes.display_url == "amqp://prober@rabbit:5672/%2F"


def test_a_clusters_nodes_are_the_probes_entries_in_order_each_with_the_password(tmp_path):
    path = _toml(tmp_path, '[probe]\namqp_url = "amqp://prober@rabbit-1:5672/%2F, amqps://prober@rabbit-2/%2F"\n')
    probes = load(cli_args(config=path), {"ACKSCOPE_AMQP_PASSWORD": "probe-pw"}).probes
    assert [e.url.reveal() for e in probes.entries] == ["amqp://prober:probe-pw@rabbit-1:5672/%2F",
                                                        "amqps://prober:probe-pw@rabbit-2/%2F"]
    assert [e.node for e in probes.entries] == ["rabbit-1:5672", "rabbit-2:5671"]
    assert probes.entries[0].ssl_options is None and probes.entries[1].ssl_options is not None
    assert "probe-pw" not in repr(probes)
    with pytest.raises(ConfigError, match="must not carry a password"):
        load(cli_args(amqp_url="amqp://a@rabbit-1/%2F,amqp://a:pw@rabbit-2/%2F"), {})


def test_no_amqp_url_means_no_probes(tmp_path):
    assert load(cli_args(), {}).probes is None


@pytest.mark.parametrize("toml, env, message", [
    ('[probe]\namqp_url = "amqp://prober@rabbit/%2F"\namqp_password = "x"\n', {}, "may not be written"),
    ('[probe]\namqp_url = "amqp://prober@rabbit/%2F"\n', {}, "no AMQP password for user 'prober'"),
    ('[probe]\namqp_url = "http://rabbit/"\n', {}, "must look like amqp(s)://"),
    ('[probe]\namqp_url = "amqp://guest@rabbit/"\n[[probe.targets]]\nname = "x"\nrate = -1\n', {}, "rate"),
])
def test_bad_probe_settings_are_refused_with_the_reason(tmp_path, toml, env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(cli_args(config=_toml(tmp_path, toml)), env)


def test_diagnose_reads_the_connection_from_the_exporters_toml_table(tmp_path, capsys):
    from ackscope.apps.cli import main
    from ackscope.workloads.ports import free_port
    path = _toml(tmp_path, f'[exporter]\nmanagement_url = "http://127.0.0.1:{free_port()}"\nlisten = "0.0.0.0:1"\n'
                           'web_username = "w"\nweb_password_file = "/nonexistent"\ninterval = 3\n'
                           '[diagnosis]\nprefetch_one_backlog = 5\n')
    assert main(["diagnose", "--config", path, "--window", "100ms"]) == 3  # read its URL, found nobody there
    assert "Connection refused" in capsys.readouterr().err
    assert main(["diagnose", "--config", _toml(tmp_path, '[diagnosis]\nnope = 1\n')]) == 2
    assert "unknown threshold 'nope'" in capsys.readouterr().err


def test_one_data_dir_serves_the_probes_and_the_snapshot_history(tmp_path):
    shared, probe_only = tmp_path / "ackscope", tmp_path / "probe-only"
    path = _toml(tmp_path, f'[exporter]\ndata_dir = "{shared}"\nsnapshot_every = 6\n'
                           '[probe]\namqp_url = "amqp://guest@rabbit/%2F"\n')
    cfg = load(cli_args(config=path), {})
    assert (cfg.data_dir, cfg.snapshot_every, cfg.probes.data_dir) == (str(shared), 6, str(shared))
    cfg = load(cli_args(config=_toml(tmp_path, '[probe]\namqp_url = "amqp://guest@rabbit/%2F"\n'
                                                f'data_dir = "{probe_only}"\n')), {})
    assert (cfg.data_dir, cfg.probes.data_dir) == (None, str(probe_only))
    assert shared.is_dir() and probe_only.is_dir()  # made at the start, as the writes will need them


def test_a_data_dir_that_cannot_be_written_is_refused_at_the_start_in_one_line(tmp_path, capsys):
    # (A read-only volume is proven in the container: root, running this, may write anywhere.)
    from ackscope.apps.cli import main
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main(["exporter", "--data-dir", str(blocked / "data")]) == 2
    assert capsys.readouterr().err == (f"ackscope exporter: --data-dir: cannot write in {blocked / 'data'}: "
                                       "Not a directory\n")
    with pytest.raises(ConfigError, match=r"\[probe\] data_dir: cannot write in .*: Not a directory"):
        load(cli_args(config=_toml(tmp_path, '[probe]\namqp_url = "amqp://guest@rabbit/%2F"\n'
                                              f'data_dir = "{blocked}/data"\n')), {})


def test_output_into_a_closed_pipe_ends_quietly():
    listing = subprocess.Popen([sys.executable, "-m", "ackscope", "scenario", "--list"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    listing.stdout.close()  # like `| head -0`: the reader is gone before the first line
    _, err = listing.communicate(timeout=30)
    assert b"Traceback" not in err and b"BrokenPipe" not in err


def test_the_probe_user_from_its_own_setting_wins_over_the_urls_and_is_shown_without_its_password():
    url = amqp.with_password("amqp://old-user@rabbitmq:5672/%2F", Secret("s3cret"), "ackscope-probe")
    assert url.url.reveal() == "amqp://ackscope-probe:s3cret@rabbitmq:5672/%2F"
    assert url.display == "amqp://ackscope-probe@rabbitmq:5672/%2F"
    bare = amqp.with_password("amqp://rabbitmq:5672/%2F", Secret("s3cret"), "ackscope-probe")
    assert bare.url.reveal() == "amqp://ackscope-probe:s3cret@rabbitmq:5672/%2F"
    assert amqp.with_password("amqp://app@rabbitmq/%2F", Secret("x")).display == "amqp://app@rabbitmq/%2F"


def test_confirm_bench_figures_are_read_at_the_start_and_a_malformed_file_is_one_line(tmp_path, capsys):
    from ackscope.apps.cli import main
    figures = tmp_path / "confirms.json"
    figures.write_text('{"broker": "amqp://rabbit/%2F", "measured_at": 1.7e9, "rates": [{"strategy": '
                       '"confirm and wait, per message", "queue_type": "classic", "rate": 812.5, "p50_seconds": null}]}')
    assert load(cli_args(confirm_bench=str(figures)), {}).confirm_bench.rates[0].rate == 812.5
    figures.write_text('{"rates": [{"strategy": "x", "queue_type": "classic", "rate": "fast"}]}')
    assert main(["exporter", "--confirm-bench", str(figures)]) == 2
    assert capsys.readouterr().err == (f"ackscope exporter: --confirm-bench {figures}: rate 1 is not a strategy, a "
                                       "queue type and a number of messages per second\n")


def test_the_dashboard_takes_several_exporters_each_named_once_and_refuses_a_bad_one_in_a_line(tmp_path):
    import argparse

    from ackscope.apps.dashboard import exporters
    from ackscope.dashboard.settings import Exporter
    listing = tmp_path / "exporters"
    listing.write_text("staging http://st:9577\n")
    given = argparse.Namespace(exporter_url=["prod-eu=http://eu:9577", "http://us:9577"], exporters=str(listing))
    assert exporters(given, {}) == (Exporter("prod-eu", "http://eu:9577"), Exporter("us:9577", "http://us:9577"),
                                    Exporter("staging", "http://st:9577"))
    assert exporters(argparse.Namespace(exporter_url=None, exporters=None), {}) == (
        Exporter("localhost:9577", "http://localhost:9577"),)
    for urls, message in ((["a=http://x:1", "a=http://y:1"], "the name 'a' is given twice"),
                          (["a=ftp://x"], "--exporter-url: "),
                          (["a=http://u:secret@x:1"], "must not carry credentials")):
        with pytest.raises(ConfigError, match=message) as refused:
            exporters(argparse.Namespace(exporter_url=urls, exporters=None), {})
        assert "secret" not in str(refused.value)
    with pytest.raises(ConfigError, match="--exporters: cannot read .*: No such file"):
        exporters(argparse.Namespace(exporter_url=None, exporters=str(tmp_path / "none")), {})


def test_diagnose_takes_each_broker_from_its_own_table_with_its_own_password_file(tmp_path):
    from ackscope.apps.diagnose import brokers
    (tmp_path / "eu.password").write_text("eu-secret\n")
    path = _toml(tmp_path, '[brokers.prod-eu]\nmanagement_url = "http://eu:15672"\nusername = "mon"\n'
                           f'password_file = "{tmp_path / "eu.password"}"\n'
                           '[brokers.local]\nmanagement_url = "http://127.0.0.1:15672"\n')
    sources = brokers(path)
    assert {name: s.base_url for name, s in sources.items()} == {"prod-eu": "http://eu:15672",
                                                                 "local": "http://127.0.0.1:15672"}
    for s in sources.values():
        s.close()
    for text, message in (('[brokers.x]\nmanagement_url = "http://x:1"\nusername = "mon"\n',
                           "brokers.x: no password_file for user 'mon'"),
                          ('[brokers.x]\nusername = "mon"\n', "brokers.x: a table with management_url"),
                          ('[brokers.x]\nmanagement_url = "http://x:1"\npassword = "inline"\n', "may not be written"),
                          ("[exporter]\n", "no \\[brokers.NAME\\] table")):
        with pytest.raises(ConfigError, match=message):
            brokers(_toml(tmp_path, text))

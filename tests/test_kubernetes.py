"""deploy/kubernetes/, validated offline: Kubernetes' own kinds against Kubernetes' schemas (kubernetes-validate,
strict), the operators' custom resources against tests/kubernetes_schemas.py, the PrometheusRule generated from
the shipped alert rules and its body checked by promtool; the manifests agree with the image and with the
options the commands read. And the systemd unit, checked by systemd-analyze with a real path."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from container_helpers import USER_ID
from kubernetes_schemas import BY_KIND

import ackscope
from ackscope.apps import dashboard, exporter
from ackscope.probes import config as probe_config

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes still maintained upstream when these were written, and the newest the validator knows.
KUBERNETES = ("1.32.0", kubernetes_validate.latest_version())


def documents() -> list[tuple[str, dict]]:
    found = [(f"{path.name}: {doc['kind']} {doc['metadata']['name']}", doc)
             for path in sorted(MANIFESTS.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert {label.split(":")[0] for label, _ in found} == {
        "rabbitmq.yaml", "exporter.yaml", "servicemonitor.yaml", "prometheusrule.yaml", "dashboard.yaml"}
    return found


def problems(doc: dict) -> list[str]:
    """What is wrong with one manifest, [] when nothing is."""
    schema = BY_KIND.get((doc["apiVersion"], doc["kind"]))
    if schema is not None:
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
    found = []
    for version in KUBERNETES:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            found.append(f"no schema for {doc['apiVersion']} {doc['kind']} in Kubernetes {version}")
        except kubernetes_validate.ValidationError as e:
            found.append(f"Kubernetes {version}: {'.'.join(map(str, e.path))}: {e.message}")
    return found


@pytest.mark.parametrize("label,doc", documents(), ids=[label for label, _ in documents()])
def test_every_manifest_validates_against_its_schema(label, doc):
    assert problems(doc) == []


def test_the_validation_fails_on_a_misplaced_key_in_a_core_kind_and_in_a_custom_resource():
    deployment = next(d for _, d in documents() if d["kind"] == "Deployment")
    wrong = yaml.safe_load(yaml.safe_dump(deployment))
    wrong["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesystem"] = True  # belongs in securityContext
    assert any("readOnlyRootFilesystem" in p for p in problems(wrong))
    permission = next(d for _, d in documents() if d["kind"] == "Permission")
    wrong = yaml.safe_load(yaml.safe_dump(permission))
    wrong["spec"]["permission"] = wrong["spec"].pop("permissions")
    assert problems(wrong)


def test_the_prometheus_rule_is_the_shipped_alert_rules_generated(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "kubernetes-rules.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rule = next(d for _, d in documents() if d["kind"] == "PrometheusRule")
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "ackscope-alerts.yml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]


def test_the_prometheus_rules_body_passes_promtool(promtool, tmp_path):
    rule = next(d for _, d in documents() if d["kind"] == "PrometheusRule")
    body = tmp_path / "rules.yml"
    body.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run([promtool, "check", "rules", str(body)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in rule['spec']['groups'])} rules found" in done.stdout


def containers() -> list[dict]:
    return [c for _, d in documents() if d["kind"] == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"]]


def test_the_deployments_run_the_image_as_it_is_built_non_root_on_a_read_only_root():
    for _, d in documents():
        if d["kind"] == "Deployment":
            pod = d["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == USER_ID
            for c in pod["containers"]:
                # Each command's image: the dashboard's own target, whose HEALTHCHECK is the dashboard's.
                image = "ackscope-dashboard" if c["args"][0] == "dashboard" else "ackscope"
                assert c["image"] == f"localhost/{image}:{ackscope.__version__}"
                assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_every_setting_the_manifests_give_is_one_the_command_reads():
    known = {"exporter": {o.env for o in (*exporter.OPTIONS, *probe_config.OPTIONS)}
             | {f"ACKSCOPE_{s.upper()}_FILE" for s in (*exporter.SECRETS, *probe_config.SECRETS)},
             "dashboard": {o.env for o in dashboard.OPTIONS}}
    for c in containers():
        names = {e["name"] for e in c.get("env", ())}
        assert names <= known[c["args"][0]], names - known[c["args"][0]]
    # The password files the exporter is told of are where its Secrets are mounted.
    exporter_container = next(c for c in containers() if c["args"][0] == "exporter")
    mounts = {m["mountPath"] for m in exporter_container["volumeMounts"]}
    for e in exporter_container["env"]:
        if e["name"].endswith("_FILE"):
            assert str(Path(e["value"]).parent) in mounts


def test_the_systemd_unit_passes_systemd_analyze_with_a_real_path(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze (Debian's systemd) is missing"
    unit = (ROOT / "deploy" / "systemd" / "ackscope-exporter.service").read_text()
    real = unit.replace("/opt/ackscope/venv/bin/ackscope", str(Path(sys.executable).with_name("ackscope")))
    assert real != unit
    good = tmp_path / "ackscope-exporter.service"
    good.write_text(real)
    done = subprocess.run([analyze, "verify", str(good)], capture_output=True, text=True)
    assert done.returncode == 0 and "ackscope-exporter" not in done.stderr, done.stderr
    # The check can fail: a misspelt directive is named.
    bad = tmp_path / "bad" / "ackscope-exporter.service"
    bad.parent.mkdir()
    bad.write_text(real.replace("RestartSec=", "RestartSecs="))
    done = subprocess.run([analyze, "verify", str(bad)], capture_output=True, text=True)
    assert "RestartSecs" in done.stderr

"""JSON Schemas of the custom resources deploy/kubernetes/ uses, for the suite's offline validation (Kubernetes'
own kinds are checked by kubernetes-validate against Kubernetes' schemas). Written here from the operators'
CRDs (RabbitMQ's cluster and messaging topology operators, rabbitmq.com/v1beta1; the Prometheus Operator,
monitoring.coreos.com/v1): the fields these manifests use, with their types, patterns and required fields, and
no field besides them, so a misspelt or misplaced key fails as the API server's strict validation would."""

from __future__ import annotations

STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# Prometheus' duration, as the Prometheus Operator's CRDs write it.
DURATION = {"type": "string",
            "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}
REFERENCE = {"type": "object", "required": ["name"], "additionalProperties": False,
             "properties": {"name": NAME, "namespace": NAME}}
METADATA = {"type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"name": NAME, "namespace": NAME, "labels": STRING_MAP, "annotations": STRING_MAP}}


def resource(spec: dict) -> dict:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": METADATA,
                           "spec": spec}}


RABBITMQ_CLUSTER = resource({
    "type": "object", "additionalProperties": False,
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "image": {"type": "string"},
        "rabbitmq": {"type": "object", "additionalProperties": False, "properties": {
            "additionalPlugins": {"type": "array", "maxItems": 100,
                                  "items": {"type": "string", "pattern": "^\\w+$"}},
            "additionalConfig": {"type": "string", "maxLength": 100000},
            "advancedConfig": {"type": "string", "maxLength": 100000},
            "envConfig": {"type": "string", "maxLength": 100000}}},
        "service": {"type": "object", "additionalProperties": False, "properties": {
            "type": {"enum": ["ClusterIP", "LoadBalancer", "NodePort"]}, "annotations": STRING_MAP}},
        "persistence": {"type": "object", "additionalProperties": False, "properties": {
            "storageClassName": {"type": "string"}, "storage": {"type": ["string", "integer"]}}},
    }})

USER = resource({
    "type": "object", "required": ["rabbitmqClusterReference"], "additionalProperties": False,
    "properties": {
        "tags": {"type": "array", "items": {"enum": ["management", "policymaker", "monitoring", "administrator"]}},
        "rabbitmqClusterReference": REFERENCE,
        "importCredentialsSecret": REFERENCE,
    }})

PERMISSION = resource({
    "type": "object", "required": ["vhost", "permissions", "rabbitmqClusterReference"], "additionalProperties": False,
    "oneOf": [{"required": ["user"]}, {"required": ["userReference"]}],
    "properties": {
        "vhost": {"type": "string"},
        "user": {"type": "string"},
        "userReference": REFERENCE,
        "permissions": {"type": "object", "additionalProperties": False, "properties": {
            "configure": {"type": "string"}, "write": {"type": "string"}, "read": {"type": "string"}}},
        "rabbitmqClusterReference": REFERENCE,
    }})

LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": STRING_MAP,
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "required": ["key", "operator"], "additionalProperties": False,
        "properties": {"key": {"type": "string"}, "operator": {"type": "string"},
                       "values": {"type": "array", "items": {"type": "string"}}}}}}}

SERVICE_MONITOR = resource({
    "type": "object", "required": ["selector"], "additionalProperties": False,
    "properties": {
        "selector": LABEL_SELECTOR,
        "jobLabel": {"type": "string"},
        "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
            "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}},
        "endpoints": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "properties": {"port": {"type": "string"}, "targetPort": {"type": ["string", "integer"]},
                           "path": {"type": "string"}, "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                           "interval": DURATION, "scrapeTimeout": DURATION, "honorLabels": {"type": "boolean"}}}},
    }})

RULE = {"type": "object", "required": ["expr"], "additionalProperties": False,
        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
        "properties": {"alert": {"type": "string"}, "record": {"type": "string"},
                       "expr": {"type": ["string", "integer"]}, "for": DURATION,
                       "keep_firing_for": DURATION, "labels": STRING_MAP, "annotations": STRING_MAP}}

PROMETHEUS_RULE = resource({
    "type": "object", "additionalProperties": False,
    "properties": {"groups": {"type": "array", "items": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": {"type": "string", "minLength": 1}, "interval": DURATION, "labels": STRING_MAP,
                       "limit": {"type": "integer"}, "query_offset": DURATION,
                       "rules": {"type": "array", "items": RULE}}}}},
})

BY_KIND = {
    ("rabbitmq.com/v1beta1", "RabbitmqCluster"): RABBITMQ_CLUSTER,
    ("rabbitmq.com/v1beta1", "User"): USER,
    ("rabbitmq.com/v1beta1", "Permission"): PERMISSION,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
}

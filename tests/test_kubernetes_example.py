"""docs/kubernetes.yaml is valid and its probes and scrapes point at what the commands serve."""

from __future__ import annotations

from pathlib import Path

import yaml

from django_dsched.management.commands import run_relay, run_scheduler

MANIFEST = Path(__file__).resolve().parent.parent / "docs" / "kubernetes.yaml"


def test_the_manifest_probes_the_health_port_and_annotates_the_metrics_port():
    deployments = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    commands = {"run_scheduler": run_scheduler.Command(), "run_relay": run_relay.Command()}
    seen = set()
    for deployment in deployments:
        pod = deployment["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        command = container["args"][2]
        parser = commands[command].create_parser("manage.py", command)
        options = parser.parse_args(container["args"][3:])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"metrics": options.metrics_port, "health": options.health_port}
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        annotations = pod["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == options.metrics_port
        seen.add(command)
    assert seen == {"run_scheduler", "run_relay"}

"""Pushing every window to Grafana Pyroscope: series (windows into labelled pprof profiles),
client (the push API over HTTP), pusher (the sink with its backlog, retries and health)."""

from sidecar.serve.push.client import Client, Endpoint, PushFailed, endpoint
from sidecar.serve.push.pusher import REASONS, Pusher, PushHealth
from sidecar.serve.push.series import pod_labels

__all__ = [
    "REASONS",
    "Client",
    "Endpoint",
    "PushFailed",
    "PushHealth",
    "Pusher",
    "endpoint",
    "pod_labels",
]

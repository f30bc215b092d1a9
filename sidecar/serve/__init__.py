"""``sidecar serve``: discovery and sampling sessions (``sessions``), the sinks that take every
window (``sinks``: the store's ``writer`` and the Pyroscope ``push``), the engine that wires
them (``service``), the HTTP API (``api``), Prometheus metrics (``metrics``) and the web UI
(``web/``, package data)."""

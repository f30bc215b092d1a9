"""A real ``sidecar serve``: targets, API, metrics, pre-fork servers, pushes to Pyroscope."""

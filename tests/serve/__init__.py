"""A real ``sidecar serve``: targets, API, metrics, pre-fork servers, pushes to Pyroscope (the
pre-fork module also checks the targets list in Chromium, as tests/ui does)."""

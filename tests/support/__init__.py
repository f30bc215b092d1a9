"""What the tiers share, and the benchmarks too, imported as ``from tests.support.X import Y``:

- ``procs``: the process harness of tests and benchmarks (ROOT, PYTHON, the ready line of a
  target, stop_process, wait_until, free_port, the benchmarks' ``Procs``);
- ``helpers``: a test's targets (``Spawner``), load (``LoadDriver``), ``sidecar serve``
  (``Serve``, ``Servers``) and CLI runs, the UI tests' Chromium;
- ``fixed_rate``: profiles of targets under a fixed request rate;
- ``task_scans``: task scans of real targets through the CLI, and their counts;
- ``faultkit``: the fault suite's /proc readings, database checks and report ledger;
  ``pid_reuse``: the script it runs as PID 1 of a fresh PID namespace;
- ``pythons``: an interpreter of each CPython version (``make pythons``);
- ``pyroscope``: a real Grafana Pyroscope (``make pyroscope``);
- oracles and fixtures of data: ``svg_oracle`` (expat's reading of flamegraph SVGs),
  ``shares_oracle`` (the shares a diff shows), ``flamegraph_pl`` (SVGs as flamegraph.pl
  draws them), ``py_spy_svg`` (py-spy's SVGs), ``stats_schema`` (the JSON of ``sidecar
  stats``).
"""

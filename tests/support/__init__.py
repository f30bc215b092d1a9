"""What the tiers share, and the benchmarks too: processes and servers of a test
(``helpers``, ``procs``), the fault suite's tools (``faultkit``), the interpreters of each
CPython version (``pythons``), a real Pyroscope (``pyroscope``) and the oracles the readers are
checked against (``svg_oracle``, ``shares_oracle``, ``flamegraph_pl``)."""

"""Profiles in and out: flamegraph SVGs read back (``svg``), SVG, folded text and speedscope
written (``render``), pprof (``pprof``), and a file told apart by content (``inputs``)."""

"""Profiles in and out: flamegraph SVGs read back (``svg``), SVG, folded text and speedscope
written (``render``), pprof (``pprof``), and a file told apart by content (``inputs``)."""

#: The formats' names, in the order of ``export.FORMATS``, which holds each one's writer and
#: reader: the command line's options offer them without importing the formats.
NAMES = ("svg", "folded", "speedscope", "pprof")

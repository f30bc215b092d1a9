"""Classification, once per unique stack: a thread sample busy, idle or blocked (``threads``),
a task sample by state and kind (``tasks``), by the rules of ``sidecar.rules``."""

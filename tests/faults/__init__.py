"""The fault and abuse suite (marker ``faults``; report in tests/reports/faults.md): faults
around the target, hostile HTTP input, scale, soak and storage faults."""

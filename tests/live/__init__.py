"""Real target processes read by the real sampler: record, sampler, walker, versions, tasks."""

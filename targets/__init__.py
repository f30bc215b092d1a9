"""Demo services for sidecar: the handlers of the articles it grew from, on aiohttp and Tornado."""

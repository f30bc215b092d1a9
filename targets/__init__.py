"""Demo services for sidecar: the seed articles' handlers on aiohttp and Tornado."""

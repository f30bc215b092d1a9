"""What profiles say: the event loop's shares, depth, layers and hot spots (``threads``), the
asyncio tasks in flight and where requests wait (``tasks``), and two profiles compared
(``diff``). No I/O happens here: the CLI and the HTTP API hand in loaded profiles."""

"""The web UI end to end in Debian's Chromium, driven by Playwright."""

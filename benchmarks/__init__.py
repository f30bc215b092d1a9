"""Performance scripts; each writes a report next to it. Not part of the tests."""

"""``sidecar serve --push``: its usage errors (what arrives at a real Pyroscope:
tests/serve/test_push.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.helpers import sidecar


def test_push_usage_errors(tmp_path: Path) -> None:
    token = tmp_path / "token"
    for args, words in (
        (("--push", "ftp://example"), "http:// or https://"),
        (("--push", "http://user:secret@127.0.0.1:1"), "must not hold credentials"),
        (("--push", "http://127.0.0.1:1", "--push-token-file", str(token)), "cannot read"),
        (("--push-token-file", str(token)), "only makes sense with --push"),
        (("--service-name", "x"), "only makes sense with --push"),
    ):
        done = sidecar("serve", "--db", str(tmp_path / "x.db"), "--pid", "1", *args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, done.stderr)
        assert "secret" not in done.stderr
    assert not (tmp_path / "x.db").exists()

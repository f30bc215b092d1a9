"""Retention: old windows pruned, evicted when the disk is full, merged into coarser windows,
rolled up into hours; stacks no sample needs any more collected; the file's size on disk.
Who held the GIL (``gil_holders``, ``gil_hour_holders``) goes, merges and rolls up with the
counts of its windows; collection keeps the frames it names. A stall goes with the window it
ended in, and moves into the coarser window that window is merged into."""

from __future__ import annotations

import os
from contextlib import suppress

from sidecar.store import counts
from sidecar.store.file import StoreFile
from sidecar.store.schema import COUNT_TABLES, HOLDER_KEY, HOLDER_TABLES, HOUR, WINDOW_SUMS

#: A holder row's key, as SQL.
_HOLDER_KEY = ", ".join(HOLDER_KEY)

#: (age in seconds, window width): data older than the age is merged into windows that wide.
DOWNSAMPLE_TIERS: tuple[tuple[int, int], ...] = ((3600, 300), (3 * 3600, 1800))


class Retention(StoreFile):
    """The retention half of ``Store``, run by the writer thread between writes."""

    def prune(self, cutoff: float, max_windows: int = 50) -> int:
        """Deletes up to ``max_windows`` of the oldest windows starting before ``cutoff``."""
        with self.transaction():
            starts = [
                int(r[0])
                for r in self.db.execute(
                    "SELECT DISTINCT window FROM windows WHERE window < ? ORDER BY window LIMIT ?",
                    (int(cutoff), max_windows),
                ).fetchall()
            ]
            if not starts:
                return 0
            last = starts[-1]
            for table, hours in COUNT_TABLES:
                self.db.execute(f"DELETE FROM {table} WHERE window <= ?", (last,))
                # an hour that lost any window is no longer whole: its rollup goes too
                self.db.execute(f"DELETE FROM {hours} WHERE hour <= ?", (last,))
            holders, hour_holders = HOLDER_TABLES
            self.db.execute(f"DELETE FROM {holders} WHERE window <= ?", (last,))
            self.db.execute(f"DELETE FROM {hour_holders} WHERE hour <= ?", (last,))
            self.db.execute("DELETE FROM stalls WHERE window <= ?", (last,))
            self.db.execute("DELETE FROM slow_requests WHERE window <= ?", (last,))
            self.db.execute("DELETE FROM windows WHERE window <= ?", (last,))
            self.db.execute("DELETE FROM rollup_hours WHERE hour <= ?", (last,))
        self._rolled = {hour for hour in self._rolled if hour > last}
        return len(starts)

    def evict_oldest(self, fraction: float = 0.1) -> int:
        """Frees room when the disk or the size cap is full: drops the oldest windows."""
        total = int(self.db.execute("SELECT COUNT(DISTINCT window) FROM windows").fetchone()[0])
        if total == 0:
            return 0
        count = max(1, int(total * fraction))
        row = self.db.execute(
            "SELECT window FROM (SELECT DISTINCT window FROM windows ORDER BY window LIMIT ?) "
            "ORDER BY window DESC LIMIT 1",
            (count,),
        ).fetchone()
        return self.prune(float(row[0]) + 1, max_windows=count) if row else 0

    def downsample(self, now: float, max_spans: int = 20) -> int:
        """Merges old windows into coarser ones (DOWNSAMPLE_TIERS); returns spans merged."""
        merged = 0
        for age, width in DOWNSAMPLE_TIERS:
            cutoff = int(now - age) // width * width
            spans = self.db.execute(
                "SELECT DISTINCT window / ? * ? FROM windows WHERE window < ? AND width < ? "
                "ORDER BY 1 LIMIT ?",
                (width, width, cutoff, width, max_spans),
            ).fetchall()
            for (span,) in spans:
                self._merge_span(int(span), width)
                merged += 1
        return merged

    def _packed(self, table: str, key: str, start: int, end: int) -> dict[tuple[int, int], bytes]:
        """The counts of every (target, process) over [start, end), merged into one blob each."""
        blobs: dict[tuple[int, int], list[bytes]] = {}
        for target_id, process_id, blob in self.db.execute(
            f"SELECT target_id, process_id, counts FROM {table} WHERE {key} >= ? AND {key} < ?",
            (start, end),
        ).fetchall():
            blobs.setdefault((int(target_id), int(process_id)), []).append(blob)
        return {ids: counts.merge(parts) for ids, parts in blobs.items()}

    def _span_holders(self, start: int, end: int) -> list[tuple[object, ...]]:
        """The GIL holders of the windows in [start, end), each (target, process, waiter,
        holder, name, site) with its samples summed."""
        return list(
            self.db.execute(
                f"SELECT {_HOLDER_KEY}, SUM(samples) FROM {HOLDER_TABLES[0]} "
                f"WHERE window >= ? AND window < ? GROUP BY {_HOLDER_KEY}",
                (start, end),
            ).fetchall()
        )

    def _insert_holders(self, table: str, when: int, rows: list[tuple[object, ...]]) -> None:
        self.db.executemany(
            f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(when, *row) for row in rows],
        )

    def _merge_span(self, span: int, width: int) -> None:
        end = span + width
        names = ", ".join(WINDOW_SUMS)
        with self.transaction():
            for table, _ in COUNT_TABLES:
                merged = self._packed(table, "window", span, end)
                self.db.execute(
                    f"DELETE FROM {table} WHERE window >= ? AND window < ?", (span, end)
                )
                self.db.executemany(
                    f"INSERT INTO {table} VALUES (?, ?, ?, ?)",
                    [(span, *ids, blob) for ids, blob in merged.items()],
                )
            holders, _ = HOLDER_TABLES
            merged_holders = self._span_holders(span, end)
            self.db.execute(f"DELETE FROM {holders} WHERE window >= ? AND window < ?", (span, end))
            self._insert_holders(holders, span, merged_holders)
            for events in ("stalls", "slow_requests"):
                self.db.execute(
                    f"UPDATE {events} SET window = ? WHERE window >= ? AND window < ?",
                    (span, span, end),
                )
            sums = self.db.execute(
                "SELECT target_id, process_id, "
                + ", ".join(f"SUM({column})" for column in WINDOW_SUMS)
                + " FROM windows WHERE window >= ? AND window < ? GROUP BY target_id, process_id",
                (span, end),
            ).fetchall()
            self.db.execute("DELETE FROM windows WHERE window >= ? AND window < ?", (span, end))
            self.db.executemany(
                f"INSERT INTO windows (window, target_id, process_id, width, {names}) "
                f"VALUES (?, ?, ?, ?, {', '.join('?' * len(WINDOW_SUMS))})",
                [(span, t, p, width, *rest) for t, p, *rest in sums],
            )

    def roll_up(self, now: float, settle: float = 30.0, max_hours: int = 6) -> int:
        """Sums each complete hour (``settle`` seconds past its end) into ``hour_counts``."""
        cutoff = int(now - settle) // HOUR * HOUR
        hours = [
            int(r[0])
            for r in self.db.execute(
                "SELECT DISTINCT window / ? * ? AS h FROM windows WHERE window < ? "
                "AND h NOT IN (SELECT hour FROM rollup_hours) ORDER BY h LIMIT ?",
                (HOUR, HOUR, cutoff, max_hours),
            ).fetchall()
        ]
        for hour in hours:
            with self.transaction():
                for table, hour_table in COUNT_TABLES:
                    merged = self._packed(table, "window", hour, hour + HOUR)
                    self.db.executemany(
                        f"INSERT INTO {hour_table} VALUES (?, ?, ?, ?)",
                        [(hour, *ids, blob) for ids, blob in merged.items()],
                    )
                self._insert_holders(HOLDER_TABLES[1], hour, self._span_holders(hour, hour + HOUR))
                self.db.execute("INSERT INTO rollup_hours VALUES (?)", (hour,))
            self._rolled.add(hour)
        return len(hours)

    def collect_stacks(self) -> int:
        """Deletes stacks, nodes and frames no sample needs any more (after retention)."""
        with self.transaction():
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS live_stacks (id INTEGER PRIMARY KEY)")
            self.db.execute("DELETE FROM temp.live_stacks")
            for table in (name for pair in COUNT_TABLES for name in pair):
                for (blob,) in self.db.execute(f"SELECT counts FROM {table}"):
                    self.db.executemany(
                        "INSERT OR IGNORE INTO temp.live_stacks VALUES (?)",
                        [(stack,) for stack in counts.stack_ids(blob)],
                    )
            self.db.execute("DELETE FROM stacks WHERE id NOT IN (SELECT id FROM temp.live_stacks)")
            cursor = self.db.execute(
                """
                WITH RECURSIVE live(id) AS (
                    SELECT id FROM stacks
                    UNION
                    SELECT n.parent FROM nodes n JOIN live ON n.id = live.id WHERE n.parent != 0
                )
                DELETE FROM nodes WHERE id NOT IN (SELECT id FROM live)
                """
            )
            self.db.execute(
                "DELETE FROM frames WHERE id NOT IN (SELECT DISTINCT frame FROM nodes) AND id NOT "
                "IN (" + " UNION ".join(f"SELECT site FROM {t}" for t in HOLDER_TABLES) + ")"
            )
            self.db.execute("DELETE FROM temp.live_stacks")
        self._forget()
        return cursor.rowcount

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with suppress(OSError):
                total += os.path.getsize(f"{self.path}{suffix}")
        return total

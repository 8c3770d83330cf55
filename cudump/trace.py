"""The launch trace: one line per launch on stderr, and trace.jsonl in the run directory."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from cudump.console import say, warn

TRACE_FILE = "trace.jsonl"


def _dims(values: list[int]) -> str:
    return "(" + ",".join(str(v) for v in values) + ")"


def _device(record: dict[str, Any]) -> str:
    device = record.get("device")
    return f" dev={device}" if isinstance(device, int) and device >= 0 else ""


def format_launch(record: dict[str, Any]) -> str:
    """The stderr line for one launch record (as written to trace.jsonl)."""
    if record["event"] == "graph-launch":
        return (
            f"cudump: #{record['launch']} pid={record['pid']}{_device(record)} graph-launch "
            f"exec={record['graph']} stream={record['stream']}"
        )
    line = (
        f"cudump: #{record['launch']} pid={record['pid']}{_device(record)} {record['kernel']} "
        f"grid={_dims(record['grid'])} block={_dims(record['block'])} smem={record['smem']} "
        f"stream={record['stream']}"
    )
    if record.get("captured"):
        line += " captured"
    return line


class TraceWriter:
    """Writes trace records from many connection threads, in arrival order."""

    def __init__(self, run_dir: Path) -> None:
        self._lock = threading.Lock()
        self._file = (run_dir / TRACE_FILE).open("a", encoding="utf-8")
        self._closed = False
        self._failed = False

    def write(self, record: dict[str, Any]) -> None:
        line = format_launch(record)
        data = json.dumps(record, separators=(",", ":"))
        with self._lock:
            if self._closed:
                return
            if not self._failed:
                try:
                    self._file.write(data + "\n")
                except OSError as err:
                    # A full disk ends the file, not the trace (nor the run).
                    self._failed = True
                    warn(f"{TRACE_FILE} stopped: {err.strerror or err}; trace lines go on")
            say(line)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            try:
                self._file.close()
            except OSError:
                pass

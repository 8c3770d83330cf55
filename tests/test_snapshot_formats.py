"""A snapshot format is one entry of the registry (cudump.rundir.formats): a toy third format
registered there, and nowhere else, is one rules may name, the writer writes and load_array
reads back, while .npy and .png stay as they were."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from records import manifest

from cudump.errors import RuleError, SnapshotError
from cudump.policy.rules import load_rules
from cudump.rundir import formats
from cudump.rundir.runs import Run, load_array

TESTS = Path(__file__).resolve().parent
W, H = 64, 48

# The toy format: the array's bytes, nothing else (read back as bytes). Its file's name goes
# in a record field of its own, `raw`, which the manifest keeps among the extra keys.
TOY = '''
import numpy as np
from cudump.rundir import formats


def _read(path, f):
    return np.frombuffer(f.read(), dtype=np.uint8)


RAW = formats.SnapshotFormat(
    "raw", ".raw", "raw", holds=lambda dtype, shape: np.dtype(dtype).kind in "uif",
    encode=lambda array, picture: formats.Encoded(
        lambda f: f.write(np.ascontiguousarray(array).tobytes())),
    read=_read)
'''

RULE = """\
rules:
  - kernel: "device::FrP0k5607tPV*"
    args: [2]
    when: after
    format: [npy, raw]
    overrides:
      2: {dtype: uint8, channels: 4, width: arg5, height: arg6, pitch: arg4}
"""


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy format registered in this process, and in the cudump a test runs (a
    sitecustomize on its PYTHONPATH): the folder to put on that path."""
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "toy_raw.py").write_text(TOY)
    (folder / "sitecustomize.py").write_text(
        "import toy_raw\nfrom cudump.rundir import formats\n"
        "formats.FORMATS[toy_raw.RAW.name] = toy_raw.RAW\n")
    monkeypatch.syspath_prepend(str(folder))
    import toy_raw
    monkeypatch.setitem(formats.FORMATS, "raw", toy_raw.RAW)
    return folder


def test_without_the_toy_rules_refuse_it_and_messages_name_npy_and_png(tmp_path: Path) -> None:
    path = tmp_path / "raw.yaml"
    path.write_text(RULE)
    with pytest.raises(RuleError, match="expected npy, png, both, digest or check-nan, got"):
        load_rules([path])
    (tmp_path / "a.raw").write_bytes(b"\0")
    with pytest.raises(SnapshotError, match=r"a\.raw: not a \.npy or \.png file"):
        load_array(tmp_path / "a.raw")


def test_a_registered_format_flows_through_rules_writer_and_reader(
        toy: Path, fake, cudump_run, tmp_path: Path) -> None:
    # The rule checks take the registry's names: the toy's is one, and the messages say so.
    rule_file = tmp_path / "raw.yaml"
    rule_file.write_text(RULE)
    (rule,) = load_rules([rule_file])
    assert rule.formats == {"npy", "raw"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(RULE.replace("[npy, raw]", "tiff"))
    with pytest.raises(RuleError, match="expected npy, png, raw, both, digest or check-nan"):
        load_rules([bad])
    default = tmp_path / "default.yaml"
    default.write_text(RULE.replace("    format: [npy, raw]\n", ""))
    assert load_rules([default])[0].formats == {"npy", "png", "raw"}

    # A run on the stand-in driver writes it beside the .npy, and names it in the record.
    ran = cudump_run([str(fake.programs["zed"]), "2", "--size", f"{W}x{H}"], "--rule",
                     str(rule_file), env_extra={"PYTHONPATH": str(toy)})
    assert ran.returncode == 0, ran.stderr
    records = manifest(ran.run_dir)
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)
    for r in records:
        assert r["png"] is None and r["raw"] == r["file"][:-len(".npy")] + ".raw"
        array = load_array(ran.run_dir / r["file"])
        raw = load_array(ran.run_dir / r["raw"])     # read back by its suffix
        assert array.shape == (H, W, 4)
        assert np.array_equal(raw, array.reshape(-1).view(np.uint8))
    # Its field comes last, as an extra key: the fields of .npy and .png keep their places.
    line = json.loads((ran.run_dir / "manifest.jsonl").read_text().splitlines()[0])
    assert list(line)[-1] == "raw" and list(line).index("file") + 1 == list(line).index("png")
    # The offline readers find a snapshot by its toy file too.
    run = Run.open(ran.run_dir)
    assert run.by_file(ran.run_dir / records[1]["raw"]) is run.snapshots[1]


def test_a_format_that_cannot_hold_the_data_writes_no_file(toy: Path) -> None:
    """The writer and dump ask each format whether it holds the data: .png only image-like
    data, the toy only numbers."""
    assert formats.by_suffix("x.RAW") is formats.FORMATS["raw"]
    assert [f.name for f in formats.in_order()] == ["npy", "png", "raw"]
    assert not formats.FORMATS["raw"].holds(np.dtype(bool), (4,))
    assert not formats.PNG.holds(np.dtype(np.float32), (100,))
    assert formats.NPY.holds(np.dtype(bool), (4,))

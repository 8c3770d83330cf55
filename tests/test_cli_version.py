"""-V and --version: cudump's version, and both listed in `cudump --help`."""

from __future__ import annotations

import pytest

from cudump.cli import main, version


@pytest.mark.parametrize("argv", [["-V"], ["--version"], ["--trace", "-V", "prog"]])
def test_the_version_is_printed_and_the_exit_status_is_zero(argv, capsys) -> None:
    try:
        status = main(argv)
    except SystemExit as done:      # argparse's exit, for an option after another
        status = done.code
    assert status == 0
    assert capsys.readouterr().out == f"cudump {version()}\n"


def test_help_lists_both_spellings(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "-V, --version" in out and "[-V]" in out

"""README.md against the code and the tutorial's scripts (docs/tutorial/): the tutorial's
markers and run.sh's steps correspond one to one, each block shows the commands run.sh runs,
fill_readme.py fills blocks and copies pictures, timeline_png.py draws a stand-in run's
timeline, the reference names every option, prompt command and rule key, the install
commands are CI's, and every link in README.md leads somewhere."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest
from PIL import Image

from cudump.cli import _commands, _parser
from cudump.policy.rules import OVERRIDE_KEYS, RULE_KEYS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TUTORIAL = ROOT / "docs" / "tutorial"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, TUTORIAL / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module           # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


fill_readme = _module("fill_readme")
timeline_png = _module("timeline_png")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def run_sh_steps() -> list[tuple[str, list[str]]]:
    return fill_readme.script_steps((TUTORIAL / "run.sh").read_text(encoding="utf-8"))


def fenced_blocks(text: str) -> list[str]:
    """The text of every fenced block of a Markdown file."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(`{3,})", lines[i])
        if m:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == m.group(1)),
                       len(lines))
            found.append("\n".join(lines[i + 1:end]))
            i = end
        i += 1
    return found


def section(text: str, heading: str) -> str:
    """From a heading line to the next heading of the same or a higher level."""
    lines = text.splitlines()
    start = lines.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    end = next((i for i in range(start + 1, len(lines))
                if re.match(rf"^#{{1,{level}}} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


# -- the tutorial ----------------------------------------------------------------------------

def test_markers_and_run_sh_steps_correspond_one_to_one() -> None:
    markers = fill_readme.markers(readme())
    steps = [name for name, _ in run_sh_steps()]
    assert len(set(markers)) == len(markers), f"a marker appears twice: {markers}"
    assert len(set(steps)) == len(steps), f"run.sh has a step twice: {steps}"
    assert markers == steps, "README.md's tutorial markers and run.sh's steps differ"
    assert 5 <= len(steps) <= 8       # a short tutorial: five minutes
    assert steps == sorted(steps) and all(s[:2] == f"{i:02d}" for i, s in enumerate(steps, 1))
    assert all(commands for _, commands in run_sh_steps()), "a step runs no command"


def test_each_tutorial_block_shows_the_commands_run_sh_runs() -> None:
    text = readme()
    for name, commands in run_sh_steps():
        shown = [line[2:] for line in fill_readme.block_text(text, name).splitlines()
                 if line.startswith("$ ")]
        assert shown == commands, f"{name}: README.md shows {shown}, run.sh runs {commands}"


def test_run_sh_commands_are_what_bash_runs() -> None:
    """run.sh passes each command to bash inside double quotes: nothing in it may be
    expanded there, so that the README's text is exactly what ran."""
    for name, commands in run_sh_steps():
        for command in commands:
            assert not set(command) & set('"$`\\'), f"{name}: {command}"
            assert command.split()[0] in ("cudump", "python3", "cat"), command


def test_the_tutorial_pictures_are_in_the_checkout() -> None:
    shown = fill_readme.pictures(readme())
    assert shown, "the tutorial shows no picture"
    for name in shown:
        assert (ROOT / fill_readme.IMG_DIR / name).is_file(), name


def test_the_batch_file_of_the_break_step_exists() -> None:
    for _, commands in run_sh_steps():
        for command in commands:
            words = shlex.split(command)
            for flag in ("--batch", "-x", "--rule"):
                if flag in words:
                    assert (ROOT / words[words.index(flag) + 1]).is_file(), command


def _fill_case(tmp_path: Path) -> tuple[Path, Path]:
    steps = [name for name, _ in run_sh_steps()]
    doc = ["# t", ""]
    for name in steps:
        doc += [f"<!-- tutorial:{name} -->", "```", "old output", "```", ""]
    doc.append(f"![x]({fill_readme.IMG_DIR}/pic.png) and again {fill_readme.IMG_DIR}/pic.png")
    readme_path = tmp_path / "README.md"
    readme_path.write_text("\n".join(doc) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    for name in steps:
        (out / f"{name}.txt").write_text(f"$ cudump {name}\nnew output of {name}\n")
    Image.new("RGB", (4, 3), "red").save(out / "pic.png")
    return readme_path, out


def test_fill_readme_fills_every_block_and_copies_the_pictures(tmp_path: Path) -> None:
    readme_path, out = _fill_case(tmp_path)
    steps = [name for name, _ in run_sh_steps()]
    (out / f"{steps[1]}.txt").write_text("```\ninner fence\n```\n")
    assert fill_readme.main([str(out), "--readme", str(readme_path), "--check"]) == 1
    assert "old output" in readme_path.read_text()
    assert fill_readme.main([str(out), "--readme", str(readme_path)]) == 0
    text = readme_path.read_text()
    assert "old output" not in text
    assert fill_readme.block_text(text, steps[0]) == f"$ cudump {steps[0]}\nnew output of " \
                                                     f"{steps[0]}"
    assert fill_readme.block_text(text, steps[1]) == "```\ninner fence\n```"
    assert "\n````\n```\ninner fence\n```\n````\n" in text
    copied = tmp_path / fill_readme.IMG_DIR / "pic.png"
    assert copied.read_bytes() == (out / "pic.png").read_bytes()
    assert fill_readme.main([str(out), "--readme", str(readme_path), "--check"]) == 0
    assert fill_readme.main([str(out), "--readme", str(readme_path)]) == 0
    assert readme_path.read_text() == text                # filling again changes nothing


@pytest.mark.parametrize("spoil", ["missing transcript", "extra transcript", "missing picture",
                                   "unclosed block", "marker out of order"])
def test_fill_readme_writes_nothing_when_things_do_not_fit(tmp_path: Path, spoil: str,
                                                            capsys) -> None:
    readme_path, out = _fill_case(tmp_path)
    steps = [name for name, _ in run_sh_steps()]
    if spoil == "missing transcript":
        (out / f"{steps[2]}.txt").unlink()
    elif spoil == "extra transcript":
        (out / "99-extra.txt").write_text("$ cudump\n")
    elif spoil == "missing picture":
        (out / "pic.png").unlink()
    elif spoil == "unclosed block":
        readme_path.write_text(readme_path.read_text().replace("old output\n```\n\n![x]",
                                                               "old output\n\n![x]"))
    else:
        text = readme_path.read_text()
        first, second = (f"<!-- tutorial:{s} -->" for s in steps[:2])
        readme_path.write_text(text.replace(first, "@@").replace(second, first)
                               .replace("@@", second))
    before = readme_path.read_text()
    assert fill_readme.main([str(out), "--readme", str(readme_path)]) == 2
    assert readme_path.read_text() == before
    assert not (tmp_path / fill_readme.IMG_DIR).exists()
    assert capsys.readouterr().err.startswith("fill_readme.py: ")


# -- timeline_png.py on timelines of stand-in runs --------------------------------------------

def test_timeline_png_draws_threads_and_streams(fake, cudump_run, tmp_path: Path) -> None:
    trace = tmp_path / "threads.json"
    # In turns: every stream is made before any launch and destroyed after all (a stream
    # destroyed and another made at the same handle would share its track).
    ran = cudump_run([str(fake.programs["threads"]), "4", "turns", "4"], "--timeline",
                     str(trace))
    assert ran.returncode == 0, ran.stderr
    picture = tmp_path / "threads.png"
    said = timeline_png.render(trace, picture)
    assert said == f"wrote {picture}: 1 process, 16 tracks, 64 slices, 0 instants"
    with Image.open(picture) as image:
        assert image.format == "PNG" and image.width == 1400
        assert image.height > 16 * timeline_png.TRACK_H
        colours = {c for _, c in image.getcolors(1 << 16) or []}
    vec_add = Image.new("RGB", (1, 1), timeline_png._colour("vecAdd")).getpixel((0, 0))
    assert vec_add in colours, "no slice drawn"


def test_timeline_png_marks_nan_reports_and_snapshots(fake, cudump_run, tmp_path: Path) -> None:
    trace = tmp_path / "nans.json"
    ran = cudump_run([str(fake.programs["nans"]), "40", "37", "23"], "--check-nan",
                     "--timeline", str(trace))
    assert ran.returncode == 0, ran.stderr
    picture = tmp_path / "nans.png"
    said = timeline_png.render(trace, picture, width=900, linear=True)
    # A thread track and a stream track; the NaN/Inf report and the producer's 3 snapshots.
    assert said == f"wrote {picture}: 1 process, 2 tracks, 80 slices, 4 instants"
    with Image.open(picture) as image:
        assert image.width == 900
        colours = {c for _, c in image.getcolors(1 << 16) or []}
    red = Image.new("RGB", (1, 1), timeline_png.INSTANT_COLOURS["NaN/Inf"]).getpixel((0, 0))
    assert red in colours, "the NaN/Inf report is not marked"


def test_timeline_png_refuses_what_is_not_a_trace(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"no": "events"}')
    assert timeline_png.main([str(bad), str(tmp_path / "x.png")]) == 2
    assert "no traceEvents" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


# -- the reference against the code ------------------------------------------------------------

def _usage_blocks(text: str) -> dict[str, str]:
    """The usage lines of the reference, by command name: in a block without `$ ` prompts,
    a line `cudump [options...` (the run command) or `cudump SUBCOMMAND ...`, with the
    indented lines that continue it."""
    found: dict[str, str] = {}
    for block in fenced_blocks(text):
        if "$ " in block:
            continue
        current = None
        for line in block.splitlines():
            m = re.match(r"^cudump (\S+)", line)
            if m:
                word = m.group(1)
                current = "run" if word.startswith("[") else None if word[0] in "-." else word
            elif not line.startswith(" "):
                current = None
            if current is not None:
                found[current] = found.get(current, "") + "\n" + line
    return found


def test_the_reference_shows_every_option_of_every_command() -> None:
    usages = _usage_blocks(readme())
    for name, command in _commands().items():
        assert name in usages, f"README.md has no usage block for cudump {name}"
        parser = _parser(command)
        for action in parser._actions:
            # Hidden options (a deprecated spelling kept for a release) stay out of it.
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", usages[name]), \
                    f"cudump {name}: {option} is not in its usage block"


def test_the_prompt_section_names_every_command_and_alias() -> None:
    import cudump.prompt.commands  # noqa: F401 - registers the commands
    from cudump.prompt.registry import REGISTRY

    text = section(readme(), "### The prompt")
    for name in REGISTRY.names():
        assert re.search(rf"`{re.escape(name)}[`/ \[]", text), f"prompt command {name}"
    for sub in REGISTRY.commands["info"].subcommands:
        assert f"`info {sub}`" in text, f"info {sub}"


def test_the_rule_format_names_every_key() -> None:
    blocks = [b for b in fenced_blocks(section(readme(), "### Rule files"))
              if b.startswith("rules:") and "# required" in b]
    assert len(blocks) == 1, "the block of every field"
    for key in RULE_KEYS:
        assert re.search(rf"^\s+(- )?{key}:", blocks[0], re.MULTILINE), key
    for key in OVERRIDE_KEYS:
        assert re.search(rf"[{{ ]{key}:", blocks[0]), key


def _commands_of(lines: list[str]) -> set[tuple[str, ...]]:
    """Commands as words, `python3 -m` in front of pip and -q left out."""
    found = set()
    for line in lines:
        words = [w for w in shlex.split(line, comments=True) if w != "-q"]
        if words[:2] == ["python3", "-m"] and words[2:3] == ["pip"]:
            words = words[2:]
        if words:
            found.add(tuple(words))
    return found


def test_the_install_commands_are_the_ones_ci_runs() -> None:
    (block,) = [b for b in fenced_blocks(section(readme(), "## Install"))
                if "pip install" in b]
    assert block.splitlines() == ['pip install ".[test]"', "python3 -m pytest -q -n 2"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _commands_of(block.splitlines()) <= _commands_of(
        [ln.strip() for ln in ci if ln.strip().startswith(("python3 ", "pip "))])


# -- links ------------------------------------------------------------------------------------

def _slugs(text: str) -> set[str]:
    """GitHub's anchors for a Markdown file's headings."""
    seen: dict[str, int] = {}
    slugs = set()
    in_block = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
        if in_block or not re.match(r"^#{1,6} ", line):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


@pytest.mark.parametrize("doc", ["README.md", "docs/internals.md", "docs/performance.md",
                                 "docs/reliability.md"])
def test_links_lead_somewhere(doc: str) -> None:
    path = ROOT / doc
    text = path.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
    assert targets or doc != "README.md"
    for target in targets:
        if re.match(r"^[a-z]+:", target):
            continue                                      # https:, mailto:
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        assert where.exists(), f"{doc}: {target}"
        if anchor:
            assert anchor in _slugs(where.read_text(encoding="utf-8")), f"{doc}: {target}"

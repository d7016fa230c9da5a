"""The README's and docs' promises: every Python snippet runs, on the CPU, as written and pasted
alone; every file they name exists, in the repository.

A snippet runs in a fresh interpreter of its own (a process), as a reader pastes it: it imports
what it uses. One that goes on from the snippet before it says so in an HTML comment on the
line above its fence, ``<!-- continues the block above -->``, and runs after that one (and what that
one continues) in one namespace. A snippet sits at the page's left margin: one indented under a list
item fails when pasted from the page's text (IndentationError). Where no GPU is to be had snippets
choose the CPU themselves (``device=None`` picks the GPU where there is one). A snippet that cannot
run here says so in the comment above it, ``<!-- not run by tests/test_docs.py: <reason> -->``, and
is reported as skipped with that reason; an excerpt of a file (``<!-- excerpt of <path> -->``) must
appear in that file word for word (less the file's comment lines).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.S | re.M)
MARKER = re.compile(
    r"<!-- (?:(not run by tests/test_docs\.py: (?P<reason>.*?))|(excerpt of (?P<excerpt>\S+))"
    r"|(?P<continues>continues the block above)) -->\s*$"
)
# Paths of the repository that the docs name: a file (with an extension) or a folder (with a trailing
# slash) under one of its folders, the target of a Markdown link, or a path in backticks that climbs
# out of its document's folder (`../x`). Env ids (gpu_marl_envs/CartPole-v1) have neither.
PATH = re.compile(
    r"(?<![\w/.-])((?:baselines|docs|tests|benchmarks|kernels|adapters|gpu_marl_envs)/[\w./-]*?"
    r"(?:\.[a-z]+|/))(?![\w/-])|\]\(((?!https?:|#|mailto:)[^)#\s]+)|`(\.\./[^`\s]+)`"
)


@dataclass
class Snippet:
    doc: Path
    line: int
    code: str
    indent: str  # the fence's
    marker: re.Match | None
    continued: Snippet | None  # the snippet this one goes on from


def snippets(docs=DOCS):
    for doc in docs:
        text = doc.read_text()
        previous = None
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.search(before)
            continued = previous if marker and marker.group("continues") else None
            previous = Snippet(doc, line, match.group("code"), match.group("indent"), marker, continued)
            yield pytest.param(previous, id=f"{os.path.relpath(doc, ROOT)}:{line}")


def test_a_snippet_that_continues_another_runs_after_it(tmp_path):
    """The marker chains a snippet to the one before (and what that one continues), and only it."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\n<!-- continues the block above -->\n```python\ny = x + 1\n```\n\n"
        "```python\nprint(x)\n```\n"
    )
    first, second, third = (param.values[0] for param in snippets([page]))
    assert second.continued is first and third.continued is None and first.continued is None


def uncommented(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))


@pytest.mark.parametrize("snippet", list(snippets()))
def test_snippet_runs(snippet, tmp_path):
    marker = snippet.marker
    if marker and marker.group("excerpt"):
        # The docs leave out the file's comment lines.
        source = uncommented((ROOT / marker.group("excerpt")).read_text())
        code = textwrap.dedent(snippet.code)
        assert uncommented(code).strip() in source, f"the snippet is not (any more) in {marker.group('excerpt')}"
        return
    if marker and marker.group("reason"):
        pytest.skip(marker.group("reason"))
    chain = [snippet]
    while chain[0].continued is not None:
        chain.insert(0, chain[0].continued)
    for earlier in chain:
        assert not earlier.indent, (
            f"{earlier.doc.name}:{earlier.line}: an indented snippet fails when pasted (IndentationError): "
            "put it at the left margin"
        )
        if earlier.marker and earlier.marker.group("reason"):
            pytest.skip(
                f"it continues the snippet of line {earlier.line}, not run here: {earlier.marker.group('reason')}"
            )
    # The clone's folders, linked into a scratch folder: the paths a snippet names are found as in
    # the clone, and what it writes (logs, checkpoints) stays out of it.
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (tmp_path / entry.name).symlink_to(entry)
    # The chain's code at its own lines of the document, blank lines between: a traceback points there.
    source = ""
    for earlier in chain:
        source += "\n" * (earlier.line - source.count("\n")) + earlier.code
    script = tmp_path / f"{snippet.doc.name}.py"
    script.write_text(source)
    run = subprocess.run([sys.executable, script.name], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"{snippet.doc.name}:{snippet.line} failed when pasted alone:\n{run.stderr[-3000:]}"


# Fenced blocks other than code (a folder tree drawn relative to its example) name no paths of the clone.
ANY_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>\w*)\n.*?^(?P=indent)```", re.S | re.M)
# What a command writes (``--out FILE``) need not exist before it runs.
OUTPUT = re.compile(r"--(?:out|json) \S+")


def named_paths():
    for doc in DOCS:
        # Blanked, not removed: the line numbers stay.
        text = ANY_FENCE.sub(
            lambda m: re.sub(r"[^\n]", " ", m.group()) if m.group("info") in ("", "text") else m.group(),
            doc.read_text(),
        )
        text = OUTPUT.sub(lambda m: " " * len(m.group()), text)
        for match in PATH.finditer(text):
            named, linked, relative = match.groups()  # (a path in backticks that leaves docs/ as a link does)
            yield doc, text.count("\n", 0, match.start()) + 1, named, linked or relative


def test_named_paths_exist():
    missing = []
    for doc, line_number, named, linked in named_paths():
        # A link is relative to its document; a named path to the repository's root or, in docs/,
        # to the docs folder (docs/benchmarks.md names `benchmarks/tag.md`). Either must be in
        # the repository: a reader's clone has nothing beside it.
        candidates = [doc.parent / linked] if linked else [ROOT / named, doc.parent / named]
        found = any(path.exists() and path.resolve().is_relative_to(ROOT) for path in candidates)
        if not found:
            missing.append(f"{doc.relative_to(ROOT)}:{line_number}: {linked or named}")
    assert not missing, "the docs name files that do not exist:\n" + "\n".join(missing)

"""The README's and docs' promises: every Python snippet runs, on the CPU, as written; every file
they name exists.

Snippets of one file run in order in one namespace (a later snippet may use an earlier one's names,
as a reader goes on). Where no GPU is to be had they choose the CPU themselves (``device=None``
picks the GPU where there is one). A snippet that cannot run here says so in an HTML comment on the
line above its fence, ``<!-- not run by tests/test_docs.py: <reason> -->``, and is reported as
skipped with that reason; an excerpt of a file (``<!-- excerpt of <path> -->``) must appear in
that file word for word (less the file's comment lines).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.S | re.M)
MARKER = re.compile(r"<!-- (?:(not run by tests/test_docs\.py: (?P<reason>.*?))|(excerpt of (?P<excerpt>\S+))) -->\s*$")
# Paths of the repository that the docs name: a file (with an extension) or a folder (with a trailing
# slash) under one of its folders, or the target of a Markdown link. Env ids (gpu_marl_envs/CartPole-v1)
# have neither.
PATH = re.compile(
    r"(?<![\w/.-])((?:baselines|docs|tests|benchmarks|kernels|adapters|gpu_marl_envs)/[\w./-]*?"
    r"(?:\.[a-z]+|/))(?![\w/-])|\]\(((?!https?:|#|mailto:)[^)#\s]+)"
)


def snippets():
    for doc in DOCS:
        text = doc.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.search(before)
            # Blank lines before the code: a traceback points at the document's own line.
            code = "\n" * line + textwrap.dedent(match.group("code"))
            yield pytest.param(doc, code, marker, id=f"{doc.relative_to(ROOT)}:{line}")


def uncommented(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))


NAMESPACES: dict[Path, dict] = {}  # one per document, shared by its snippets in order


@pytest.mark.parametrize(("doc", "code", "marker"), list(snippets()))
def test_snippet_runs(doc, code, marker, tmp_path, monkeypatch):
    if marker and marker.group("excerpt"):
        # The docs leave out the file's comment lines.
        source = uncommented((ROOT / marker.group("excerpt")).read_text())
        assert uncommented(code).strip() in source, f"the snippet is not (any more) in {marker.group('excerpt')}"
        return
    if marker:
        pytest.skip(marker.group("reason"))
    # The clone's folders, linked into a scratch folder: the paths a snippet names are found as in
    # the clone, and what it writes (logs, checkpoints) stays out of it.
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (tmp_path / entry.name).symlink_to(entry)
    monkeypatch.chdir(tmp_path)
    namespace = NAMESPACES.setdefault(doc, {"__name__": "__docs__"})
    exec(compile(code, str(doc), "exec"), namespace)


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
            yield doc, text.count("\n", 0, match.start()) + 1, *match.groups()


def test_named_paths_exist():
    missing = []
    for doc, line_number, named, linked in named_paths():
        # A link is relative to its document; a named path to the repository's root or, in docs/,
        # to the docs folder (docs/benchmarks.md names `benchmarks/tag-h100.md`).
        found = (doc.parent / linked).exists() if linked else (ROOT / named).exists() or (doc.parent / named).exists()
        if not found:
            missing.append(f"{doc.relative_to(ROOT)}:{line_number}: {linked or named}")
    assert not missing, "the docs name files that do not exist:\n" + "\n".join(missing)

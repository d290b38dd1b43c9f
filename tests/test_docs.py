"""The README a newcomer finishes, and docs that are references: every measured figure lives once, in
docs/benchmarks.md, under the command that measures it; the other documents link to it.

A measured figure is what `bench/` writes: a decimal with its unit (`0.142 s`, `13.8 ms`, `2.9 GiB`, `9.5 %`,
`3.2 minutes`) or a ratio (`0.35×`). In docs/benchmarks.md's tables a cell's number takes the unit that closes
the cell (`| 0.038 / 0.311 ms |`) or its column's (`| median s |` over `| 0.95 |` states 0.95 s).

Every other document (README.md, CONTRIBUTING.md, docs/*.md) quotes a figure in its text only where
docs/benchmarks.md states that same number with that same unit; the README and the testing guide quote none.
Code (fenced blocks and `inline code`) is what a command prints or is given, verbatim, and is not read for
figures. The check compares number and unit, not what they measure, and cannot tell a fact from a measurement:
a fact that is no measurement (a default, a limit, a protocol constant) is written as a whole number (`500 ms`,
not `0.5 s`), so that it does not read as one."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "docs" / "benchmarks.md"
# Documents that are references of their own and quote no figure: the README points to the benchmarks, and the
# testing guide says how the suite runs, not what each run took (git history keeps the runs).
WITHOUT_FIGURES = [REPO / "README.md", REPO / "docs" / "testing.md"]
UNITS = r"ms|s|MiB|GiB|MB|kB|%|minutes|min"
FIGURE = re.compile(rf"(?<![\w.,])(\d+(?:,\d{{3}})*\.\d+) ?({UNITS})(?!\w)|(?<![\w.,])(\d+(?:\.\d+)?) ?(×)")
DECIMAL = re.compile(r"(?<![\w.,])\d+(?:,\d{3})*\.\d+(?![\w.])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def figures(text: str) -> set[tuple[str, str]]:
    """The measured figures written in running text, as (number, unit): ('0.142', 's'), ('0.35', '×')."""
    return {(m.group(1) or m.group(3), m.group(2) or m.group(4)) for m in FIGURE.finditer(text)}


def stated_in_tables(text: str) -> set[tuple[str, str]]:
    """The decimals of every Markdown table cell, each with the unit that closes the cell or, failing that, the
    last unit its column's header names."""
    stated: set[tuple[str, str]] = set()
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        for title, cell in zip(header, cells):
            # A cell's own closing unit (`0.038 / 0.311 / 0.619 ms`), else its column's (`| median s |`).
            units = re.findall(rf"(?<!\w)({UNITS}|×)(?!\w)", title)
            closing = re.search(rf"\d ?({UNITS})\W*$", cell)
            unit = closing.group(1) if closing else units[-1] if units else None
            if unit:
                stated |= {(number, unit) for number in DECIMAL.findall(cell)}
    return stated


def documents() -> list[Path]:
    """README.md, CONTRIBUTING.md and every docs/*.md."""
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text with its code left out, fenced blocks and `inline code` alike (what a command prints or is given,
    verbatim); lines keep their places."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", lambda block: "\n" * block.group(0).count("\n"), text,
                  flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "``", text)


def unstated(text: str, stated: set[tuple[str, str]]) -> list[tuple[int, str, str]]:
    """The figures of a document's text, outside its code, that are not in `stated`: (line number, number, unit)."""
    return [(number_of_line, number, unit)
            for number_of_line, line in enumerate(prose(text).splitlines(), 1)
            for number, unit in sorted(figures(line) - stated)]


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines() if re.match(r"#{1,6} ", line)}


def test_the_readme_is_at_most_150_lines():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md is {len(lines)} lines: move details into docs/, one line per document"


def test_the_readme_and_the_testing_guide_quote_no_measured_figure():
    """A figure in the README went stale beside the benchmark that measured it again (1,000 AMQP 1.0 connections
    at 1.60 s in its setup, 0.02 s added in its own documentation list): they link docs/benchmarks.md instead."""
    for path in WITHOUT_FIGURES:
        found = sorted(figures(path.read_text()))
        assert not found, f"{path.name} quotes measured figures, which live in docs/benchmarks.md: {found}"


def test_every_figure_a_document_quotes_is_one_docs_benchmarks_md_states():
    """Anywhere in any document, not only beside a benchmark: a figure docs/benchmarks.md does not state with that
    number and unit is a second copy that goes stale, or a measurement kept away from its command."""
    text = BENCHMARKS.read_text()
    stated = figures(text) | stated_in_tables(text)
    unknown = [f"{path.name}:{line}: {number} {unit}"
               for path in documents() if path != BENCHMARKS
               for line, number, unit in unstated(path.read_text(), stated)]
    assert not unknown, ("figures docs/benchmarks.md does not state: add them there under the command that "
                         "measured them and link to it, or write a fact that is no measurement as a whole "
                         "number:\n" + "\n".join(unknown))


def test_the_check_knows_a_stale_figure_from_a_stated_one():
    text = BENCHMARKS.read_text()
    stated = figures(text) | stated_in_tables(text)
    assert ("0.142", "s") in stated  # running text: the AMQP 1.0 poll after, at 1,000 connections
    assert ("0.95", "s") in stated  # a table cell under `median s`: upgrade-check at 5,000 queues
    assert ("0.038", "ms") in stated  # a table cell closed by its unit: the probes against the wire
    assert figures("takes 1.60 s instead of 0.39 s, 0.35× the naive") == {("1.60", "s"), ("0.39", "s"),
                                                                          ("0.35", "×")}
    assert ("1.19", "s") not in figures("4.0 and 4.3, 2,000 queues, port 15692, 10 s, `--interval 10`")
    sample = "A poll took\n6.4 s.\n\n```\ndone in 33.3 s\n```\n`within 5.0s`, 0.47 s and 0.142 s"
    assert figures(prose(sample)) == {("6.4", "s"), ("0.47", "s"), ("0.142", "s")}
    assert unstated(sample, {("0.142", "s")}) == [(2, "6.4", "s"), (7, "0.47", "s")]


def test_every_relative_link_in_the_docs_reaches_a_file_and_its_heading():
    broken = []
    for path in documents():
        for target in LINK.findall(path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            reached = (path.parent / file).resolve() if file else path
            if not reached.exists():
                broken.append(f"{path.name} links {target}: no such file")
            elif anchor and reached.suffix == ".md" and anchor not in anchors(reached):
                broken.append(f"{path.name} links {target}: no such heading")
    assert not broken, "\n".join(broken)

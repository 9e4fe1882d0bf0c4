"""README and docs: the Documentation list names every page of docs/ (issue 23, item 6);
the figures agree with each other and name their command (issue 22, item 5)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _pages() -> list[str]:
    """Every page under docs/, recursively (docs/design/ included), as a repo path."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))


def _documentation_list() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Documentation") :]
    return section[: section.index("\n## ", 5)]


def test_documentation_list_names_every_doc() -> None:
    """Every page under docs/ (docs/design/ too) is one click from the README: its
    Documentation list links it, and links nothing that is not there (issue 39)."""
    listed = set(re.findall(r"\]\((docs/[\w/-]+\.md)\)", _documentation_list()))
    docs = set(_pages())
    assert docs - listed == set(), f"missing from the README's Documentation list: {docs - listed}"
    assert listed - docs == set(), f"listed but missing: {listed - docs}"


def test_documentation_list_puts_user_pages_before_design_notes() -> None:
    """The list gives the pages a user reads (docs/*.md) first, then the design notes
    (docs/design/): every user page's link comes before the first design page's."""
    section = _documentation_list()
    links = re.findall(r"\]\((docs/[\w/-]+\.md)\)", section)
    design = [i for i, link in enumerate(links) if link.startswith("docs/design/")]
    user = [i for i, link in enumerate(links) if not link.startswith("docs/design/")]
    assert design and user, links
    assert max(user) < min(design), links


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_relative_link_resolves() -> None:
    """Every relative link and image of README.md, CHANGELOG.md and the pages under docs/
    (outside code blocks) names a file that exists, relative to the page that links it,
    and a ``#fragment`` names a heading of that file: after a page moves, no link is left
    pointing at its old place (issue 39)."""
    broken = []
    for name in ["README.md", "CHANGELOG.md", *_pages()]:
        page = ROOT / name
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for m in _LINK.finditer(text):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.is_file():
                broken.append(f"{name}: {target} (no such file)")
            elif fragment and file.suffix == ".md" and fragment not in _anchors(file):
                broken.append(f"{name}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


_TEXT = {".md", ".py", ".sql", ".sh", ".toml", ".txt", ""}


def test_no_file_names_a_page_where_it_is_not() -> None:
    """Every ``docs/....md`` a file of the repository names (code, SQL headers, tests,
    scripts, ``.ci``, pyproject, docs themselves) is a page that exists, so a moved page
    leaves no pointer to its old place. Applied migrations are left out: their text is
    checksummed, and changing a comment there would be drift."""
    stale = []
    roots = ["README.md", "CHANGELOG.md", "pyproject.toml", "docs", "langgraph_delta_postgres",
             "sql", "scripts", "tests", ".ci"]
    for root in roots:
        base = ROOT / root
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for f in files:
            if f.suffix not in _TEXT or "__pycache__" in f.parts:
                continue
            try:
                text = f.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for ref in set(re.findall(r"(?<![\w/.])docs/[\w/-]+\.md\b", text)):
                if not (ROOT / ref).is_file():
                    stale.append(f"{f.relative_to(ROOT)}: {ref}")
    assert not stale, "files naming pages that are not there:\n" + "\n".join(sorted(stale))


def test_ledger_column_is_named_as_in_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ddl = (ROOT / "sql" / "migrate.sql").read_text(encoding="utf-8")
    assert "checksum TEXT NOT NULL" in ddl
    ledger = readme[readme.index("`langgraph_delta_migrations` (") :][:200]
    assert "`checksum`" in ledger and "sha256, applied" not in ledger


# Figures (issue 22, item 5): README and docs agree with each other and with the run they
# name; every section that gives a speed figure names the command that produced it.

_RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)x\b")
_RATE = re.compile(r"(\d[\d,]*) threads/s")
_FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?x\b|threads/s|(?<![\w.])\d+(?:\.\d+)? ?(?:ms|s)\b")
_COMMAND = re.compile(
    r"langgraph-delta-pg (?:bench|demo|inspect|prune)|scripts/\w+\.py|python -m "
    r"|tests/[\w/]+\.py|bench/\w+\.py"
)


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _sections(text: str) -> list[str]:
    """The text cut at its ``##`` / ``###`` headings (fenced code blocks are kept)."""
    return re.split(r"\n(?=#{2,3} )", text)


def _section(text: str, heading: str) -> str:
    return next(s for s in _sections(text) if s.startswith(heading))


def _retention_source() -> tuple[str, dict[str, Any]]:
    """The retention figures docs/retention.md names: the ``--json PATH`` of the command
    in its "Measured" section, and the ``retention`` part of that JSON."""
    measured = _section(_text("docs/retention.md"), "## Measured")
    path = re.search(r"langgraph-delta-pg bench [^\n`]*--json (\S+)", measured)
    assert path, "docs/retention.md, Measured: names no `langgraph-delta-pg bench ... --json`"
    data = json.loads((ROOT / path.group(1)).read_text(encoding="utf-8"))
    return path.group(1), data["retention"]


def test_retention_figures_are_one_run_everywhere() -> None:
    """The prune rates and the full-snapshot ratio are the same in README and
    docs/retention.md, and are those of the JSON docs/retention.md names."""
    source, ret = _retention_source()
    rates = {
        f"{round(ret['delta_threads_per_s']):,}",
        f"{round(ret['full_threads_per_s']['ours']):,}",
        f"{round(ret['full_threads_per_s']['official']):,}",
    }
    if "compacted_threads_per_s" in ret:  # prune(graph=...): compaction
        rates.add(f"{round(ret['compacted_threads_per_s']):,}")
    ratio = f"{ret['full_official_over_ours_median']:.2f}x"
    delta = f"{round(ret['delta_threads_per_s']):,} threads/s"
    for name, text in (
        ("README.md", _section(_text("README.md"), "## Benchmark")),
        ("docs/retention.md", _section(_text("docs/retention.md"), "## Measured")),
    ):
        found = set(_RATE.findall(text))
        # a rate on a line that says it was measured before a change is history, not a figure
        history = {
            m for line in text.splitlines() if "before" in line or "first run" in line
            for m in _RATE.findall(line)
        }
        assert delta in text, f"{name}: no {delta!r} ({source})"
        assert ratio in text, f"{name}: no {ratio!r} ({source})"
        assert found - history <= rates, (
            f"{name}: prune rates {sorted(found - history - rates)} are not those of {source} "
            f"({sorted(rates)}); regenerate the text from it"
        )


def _report_ratios() -> set[float]:
    report = _text("docs/benchmarks.md")
    return {float(x) for x in _RATIO.findall(report)}


def test_readme_benchmark_ratios_are_those_of_the_report() -> None:
    """Every ratio the README's Benchmark section gives is one docs/benchmarks.md gives
    (at the README's precision), or the retention ratio of the same run: one run."""
    section = _section(_text("README.md"), "## Benchmark")
    _, ret = _retention_source()
    known = _report_ratios() | {round(ret["full_official_over_ours_median"], 2)}
    missing = []
    for x in _RATIO.findall(section):
        digits = len(x.split(".")[1])
        if not any(round(k, digits) == float(x) for k in known):
            missing.append(f"{x}x")
    assert not missing, (
        f"README, Benchmark: {missing} appear nowhere in docs/benchmarks.md; quote the run "
        "the report is of (langgraph-delta-pg bench --json docs/img/benchmarks.json --out docs)"
    )


def test_readme_says_which_targets_are_not_met() -> None:
    """docs/benchmarks.md marks each target met or not; when one is not, the README
    must not claim them all and must say which are not met."""
    report = _text("docs/benchmarks.md")
    unmet = re.findall(r"[<>]= \d+(?:\.\d+)?x: no\b|\| no \|", report)
    section = _section(_text("README.md"), "## Benchmark").lower()
    if unmet:
        assert "all met" not in section and "all targets met" not in section
        assert "not met" in section
        # the single-call targets (the "Headline" table of the report) are among them
        headline = _section(report, "## Headline")
        if "| no |" in headline:
            assert "single" in section, "README: say whether the single-call targets are met"


#: The pages ``langgraph-delta-pg bench --out docs`` writes: the summary and the detail.
_GENERATED = ("docs/benchmarks.md", "docs/design/benchmarks-detail.md")


def test_benchmark_report_names_its_command() -> None:
    """Both pages of the benchmark report (the summary and its per-section detail) name,
    above their first section, the command of the run whose JSON is kept."""
    data = json.loads((ROOT / "docs/img/benchmarks.json").read_text(encoding="utf-8"))
    assert "--json docs/img/benchmarks.json" in data["command"]
    for name in _GENERATED:
        assert data["command"] in _text(name).split("\n## ", 1)[0], name


def test_benchmark_pages_are_the_report_of_the_kept_run() -> None:
    """docs/benchmarks.md and docs/design/benchmarks-detail.md are exactly what the
    report renders from docs/img/benchmarks.json (``bench --out docs`` writes both, plots
    in docs/img/): no figure on either page is edited by hand or from another run, and
    the detail's plots are found from docs/design/."""
    from langgraph_delta_postgres.bench.report import page as report

    assert f"docs/{report.DETAIL}" == _GENERATED[1]
    res = json.loads((ROOT / "docs/img/benchmarks.json").read_text(encoding="utf-8"))
    img = ROOT / "docs" / "img"
    names = [f"{wl}_{what}.png" for wl in res.get("workloads", {})
             for what in ("storage", "resume")] + ["load.png"]
    images = [img / n for n in names if (img / n).is_file()]
    assert report.markdown(res, "img", images) == _text(_GENERATED[0])
    assert report.detail_markdown(res, "../img", images) == _text(_GENERATED[1])


def test_every_section_with_a_speed_figure_names_a_command() -> None:
    """Per ``##`` section of README and every page under docs/, docs/design/ included (the
    two benchmark pages are generated and name their command at the top): a ratio, a rate
    or a time outside code blocks needs the command that measured it (``langgraph-delta-pg
    bench``, a script, a test) in the same section."""
    pages = ["README.md"] + [p for p in _pages() if p not in _GENERATED]
    assert "docs/design/history-cache.md" in pages  # the design notes are checked too
    bare = []
    for name in pages:
        for section in _sections(_text(name)):
            prose = re.sub(r"```.*?```", "", section, flags=re.S)  # sample output is no figure
            figures = _FIGURE.findall(prose)
            if figures and not _COMMAND.search(section):
                bare.append(f"{name}: {section.splitlines()[0][:60]!r} {figures[:3]}")
    assert not bare, "sections with figures and no command:\n" + "\n".join(bare)


def test_snapshot_frequency_doc_is_the_scripts_table() -> None:
    """docs/snapshot-frequency.md names its script, and its table has the script's
    columns: loads cold (a new saver per call), with cache_bytes=0, and warm."""
    doc = _text("docs/snapshot-frequency.md")
    assert "scripts/snapshot_frequency.py" in doc
    spec = importlib.util.spec_from_file_location(
        "snapshot_frequency", ROOT / "scripts" / "snapshot_frequency.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    header = next(line for line in doc.splitlines() if line.startswith("| snapshot_frequency"))
    for point in mod.POINTS:
        for way in mod.WAYS:
            assert f"{point}, {mod.LABELS[way]}" in header, (point, way)


def test_api_cli_table_is_the_parser() -> None:
    """docs/api.md's command table names every command of ``langgraph-delta-pg`` and, per
    command, exactly its options (and ``bench``'s ``--only`` choices), as argparse has them
    (issue 38, item 7: the table had gone stale)."""
    import argparse

    from langgraph_delta_postgres.cli.main import build_parser

    table = _section(_text("docs/api.md"), "## Command line")
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(r"^\| `(\w+)[^|]*\|.*$", table, flags=re.M)
    }
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(rows) == set(sub.choices), (set(rows), set(sub.choices))
    for name, sp in sub.choices.items():
        usage = re.split(r"(?<!\\)\|", rows[name])[1]  # the first cell: command and options
        flags = {
            o for a in sp._actions for o in a.option_strings
            if o.startswith("--") and o != "--help" and a.help != argparse.SUPPRESS
        }
        listed = set(re.findall(r"--[\w-]+", usage))
        assert flags == listed, f"{name}: parser {sorted(flags)}, docs/api.md {sorted(listed)}"
        for a in sp._actions:
            if a.choices and a.option_strings and a.help != argparse.SUPPRESS:
                for choice in a.choices:
                    assert str(choice) in usage, f"{name} {a.option_strings[0]}: {choice}"

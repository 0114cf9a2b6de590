"""Every stated duration is a row of docs/times.md: each quote `DURATION (docs/times.md: ROW)`
in the README, docs/, the recipes' comments and scripts/ is its row's "quoted" figure, and the
places a newcomer reads for how long a run takes (the README's quickstart and test suite, the
recipes' headers, scripts/test.sh) quote the table instead of a number of their own."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMES = REPO / "docs" / "times.md"
DURATION = r"\d[\d.,]*(?:-\d[\d.,]*)?\s+(?:s|min|h)"
# `5 min (docs/times.md: quickstart)` in comments, `5 min ([times](docs/times.md): quickstart)`
# in Markdown (any relative path to the page).
QUOTE = re.compile(rf"({DURATION})\s+\((?:\[times\]\()?(?:\.\./)*(?:docs/)?times\.md\)?:\s+(?:#\s*)?([a-z0-9-]+)\)")
# A recipe header or script comment stating a run time of its own: "About 9 minutes on 2 CPU cores".
OWN_DURATION = re.compile(r"(?:about|~)\s*(?:a|an|\d[\d.,]*)\s*(?:minutes?|min|hours?|h)\b", re.I)


def table() -> dict[str, str]:
    """Row name -> its quoted duration, from the table of docs/times.md."""
    rows = {}
    for line in TIMES.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`[a-z0-9-]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def quoting_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "recipes").rglob("*.yaml")), *sorted((REPO / "scripts").glob("*.sh"))]


def quotes() -> list[tuple[Path, str, str]]:
    return [(path, " ".join(duration.split()), row) for path in quoting_files()
            for duration, row in QUOTE.findall(path.read_text())]


def test_the_table_has_a_measured_duration_for_every_row():
    rows = table()
    assert {"quickstart", "quickstart-bafe1c0", "micro", "tests-fast"} <= rows.keys()
    for row, quoted in rows.items():
        assert re.fullmatch(DURATION, quoted), f"docs/times.md row {row}: quoted {quoted!r}"


def test_every_quoted_duration_is_its_rows():
    rows = table()
    found = quotes()
    assert found, "no duration quotes docs/times.md"
    wrong = [f"{path.relative_to(REPO)}: {duration} for {row} (table: {rows.get(row, 'no such row')})"
             for path, duration, row in found if rows.get(row) != duration]
    assert not wrong, wrong


def test_where_a_newcomer_reads_a_run_time_it_quotes_the_table():
    quoted_in = {(path.relative_to(REPO).as_posix(), row) for path, _, row in quotes()}
    for place in [("README.md", "quickstart"), ("README.md", "tests-fast"),
                  ("scripts/test.sh", "tests-fast"), ("recipes/quickstart.yaml", "quickstart"),
                  ("recipes/mini/micro.yaml", "micro"), ("docs/commands.md", "quickstart")]:
        assert place in quoted_in, f"{place[0]} does not quote docs/times.md: {place[1]}"


def test_no_recipe_or_script_states_a_run_time_of_its_own():
    own = []
    for path in [*sorted((REPO / "recipes").rglob("*.yaml")), REPO / "scripts" / "test.sh"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if OWN_DURATION.search(line) and not QUOTE.search(line):
                own.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not own, own

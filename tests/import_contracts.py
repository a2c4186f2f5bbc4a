"""PersoBench's own import-linter contract types (registered in ``.importlinter`` under ``contract_types``).

import-linter's built-in contracts (``layers``, ``acyclic_siblings``, ``private_modules``, ``forbidden``)
see which module imports which; these three add what they cannot see (docs/development.md, "Layers
and public APIs"):

* ``public_api``: the front ends (``importers``) import from the library only the modules listed in
  ``public_modules`` (each a package's ``__init__``), and only names that module lists in ``__all__``;
  a name read as an attribute of such a module (``pipeline.score``) counts too.
* ``private_names``: a ``_name`` is imported, or read as ``module._name``, only inside the package of
  the module that defines it.
* ``dynamic_imports``: ``importlib.import_module`` / ``__import__`` / ``runpy`` only in the listed
  modules (the registry's lazy ``"module:attr"`` entries), so no import hides from the contracts.
* ``package_fronts``: a package's ``__init__`` (its front) never imports, even through other modules,
  a module of the package that takes names from the front: that module would run into a
  half-initialised package. (``acyclic_siblings`` sees siblings, not a package and its children.)

grimp gives the first line of each import statement; the names a statement takes are read from the
source with ``ast`` at that line.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Any, Iterator

from importlinter import Contract, ContractCheck, fields, output

#: Calls that import a module named by a string, invisible to an import graph.
DYNAMIC_IMPORT_CALLS = frozenset({"importlib.import_module", "import_module", "__import__", "importlib.__import__",
                                  "runpy.run_module", "runpy.run_path"})


@functools.cache
def _root_dirs(root: str) -> tuple[Path, ...]:
    spec = importlib.util.find_spec(root)  # a top-level name: finds it, never runs the package
    if spec is None or not spec.submodule_search_locations:
        return ()
    return tuple(Path(p) for p in spec.submodule_search_locations)


@functools.cache
def _source(module: str) -> Path | None:
    root, *rest = module.split(".")
    for base in _root_dirs(root):
        path = base.joinpath(*rest)
        for candidate in (path / "__init__.py", path.with_suffix(".py")):
            if candidate.is_file():
                return candidate
    return None


def _is_package(module: str) -> bool:
    source = _source(module)
    if source is None:  # a namespace package such as ``pages`` is a root
        return "." not in module and bool(_root_dirs(module))
    return source.name == "__init__.py"


def _package_of(module: str) -> str:
    """The package a module belongs to: itself for a package's ``__init__``, else its parent."""
    return module if _is_package(module) else module.rpartition(".")[0]


@functools.cache
def _tree(module: str) -> ast.Module | None:
    path = _source(module)
    return ast.parse(path.read_text(encoding="utf-8")) if path is not None else None


def _walk(module: str) -> Iterator[ast.AST]:
    tree = _tree(module)
    return ast.walk(tree) if tree is not None else iter(())


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` statement names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    here = importer if _is_package(importer) else importer.rpartition(".")[0]
    parts = here.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _names_at(importer: str, line: int, imported: str) -> list[str]:
    """The names the ``from ... import`` statement starting at ``line`` takes from ``imported``;
    ``from pkg import module`` takes the module, no name of ``pkg``."""
    for node in _walk(importer):
        if isinstance(node, ast.ImportFrom) and node.lineno == line and _absolute(importer, node) == imported:
            return [alias.name for alias in node.names if _source(f"{imported}.{alias.name}") is None]
    return []


def _bound_modules(importer: str, modules: set[str]) -> dict[str, str]:
    """Local name -> module, for every name ``importer`` binds to one of ``modules`` (``import a.b as c``,
    ``from a import b`` where ``a.b`` is a module)."""
    bound: dict[str, str] = {}
    for node in _walk(importer):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(importer, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname] = alias.name
    return bound


@functools.cache
def _all_of(module: str) -> frozenset[str] | None:
    """The literal ``__all__`` of a module, or None when it states none."""
    tree = _tree(module)
    for node in tree.body if tree is not None else ():
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                return frozenset(ast.literal_eval(node.value))
    return None


def _within(module: str, prefixes: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _strings(field_value: Any) -> set[str]:
    return {str(value) for value in field_value}


class _ListedProblems(Contract):
    """A contract whose check collects one line per problem and prints them when broken."""

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["problems"]:
            output.print(line)


class PublicApiContract(_ListedProblems):
    """``importers`` take from ``library`` only ``public_modules``, and only the names in their ``__all__``."""

    type_name = "public_api"
    importers = fields.ListField(subfield=fields.StringField())
    public_modules = fields.ListField(subfield=fields.StringField())
    own_packages = fields.ListField(subfield=fields.StringField(), required=False, default=[])
    library = fields.StringField(required=False, default="persobench")

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        importers, public = _strings(self.importers), _strings(self.public_modules)
        library = {str(self.library)}
        problems: list[str] = []
        for importer in sorted(m for m in graph.modules if _within(m, importers)):
            own = {p for p in importers if _within(importer, {p})} | _strings(self.own_packages)
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if not _within(imported, library) or _within(imported, own):
                    continue
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    where = f"{importer}:{detail['line_number']}"
                    if imported not in public:
                        problems.append(f"{where}: imports {imported}, not a public API "
                                        f"({detail['line_contents'].strip()})")
                        continue
                    exported = _all_of(imported) or frozenset()
                    problems += [f"{where}: {imported}.{name} is not in {imported}.__all__"
                                 for name in _names_at(importer, detail["line_number"], imported)
                                 if name not in exported]
            # `from persobench import pipeline` then `pipeline.X`: X must be public too.
            bound = _bound_modules(importer, public)
            for node in _walk(importer):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                    module = bound[node.value.id]
                    if node.attr not in (_all_of(module) or frozenset()) and _source(f"{module}.{node.attr}") is None:
                        problems.append(f"{importer}:{node.lineno}: {module}.{node.attr} is not in {module}.__all__")
        return ContractCheck(kept=not problems, metadata={"problems": problems})


class PrivateNamesContract(_ListedProblems):
    """A ``_name`` is used only inside the package of the module that defines it."""

    type_name = "private_names"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        roots = _strings(self.packages)
        modules = {m for m in graph.modules if _within(m, roots)}
        problems: list[str] = []
        for importer in sorted(modules):
            home = _package_of(importer)
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if imported not in modules or _package_of(imported) == home:
                    continue
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    problems += [f"{importer}:{detail['line_number']}: {imported}.{name} is private to "
                                 f"{_package_of(imported)}"
                                 for name in _names_at(importer, detail["line_number"], imported) if _private(name)]
            bound = _bound_modules(importer, modules)
            for node in _walk(importer):
                if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                        and node.value.id in bound and _package_of(bound[node.value.id]) != home):
                    problems.append(f"{importer}:{node.lineno}: {node.value.id}.{node.attr} is private to "
                                    f"{_package_of(bound[node.value.id])}")
        return ContractCheck(kept=not problems, metadata={"problems": problems})


class DynamicImportsContract(_ListedProblems):
    """Modules import by statements; only ``allowed`` ones import a module named by a string."""

    type_name = "dynamic_imports"
    packages = fields.ListField(subfield=fields.StringField())
    allowed = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        roots, allowed = _strings(self.packages), _strings(self.allowed)
        problems: list[str] = []
        for module in sorted(m for m in graph.modules if _within(m, roots) and m not in allowed):
            for node in _walk(module):
                if isinstance(node, ast.Call) and ast.unparse(node.func) in DYNAMIC_IMPORT_CALLS:
                    problems.append(f"{module}:{node.lineno}: {ast.unparse(node.func)}(...) hides an import "
                                    "from the contracts")
        return ContractCheck(kept=not problems, metadata={"problems": problems})


class PackageFrontsContract(_ListedProblems):
    """No module below a package both imports the package's ``__init__`` and is imported by it."""

    type_name = "package_fronts"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        roots = _strings(self.packages)
        problems: list[str] = []
        for module in sorted(m for m in graph.modules if _within(m, roots) and m not in roots):
            above = [module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)]
            for package in above:
                if package in roots or not graph.direct_import_exists(importer=module, imported=package):
                    continue
                chain = graph.find_shortest_chain(importer=package, imported=module)
                if chain:
                    lines = sorted({d["line_number"] for d in graph.get_import_details(importer=module,
                                                                                      imported=package)})
                    problems.append(f"{module}:{lines[0]}: takes names from {package}, which imports it "
                                    f"({' -> '.join(chain)}): import them from the module that defines them")
        return ContractCheck(kept=not problems, metadata={"problems": problems})

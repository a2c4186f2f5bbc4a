"""Names vulture reports as unused that are used, by a caller it cannot see ([tool.vulture] in
pyproject.toml scans this file with the code; tests/test_lint.py runs it). Not imported by anything.
Each group says who uses the names; a name that becomes really unused is deleted, not added here."""
# ruff: noqa: B018, F821

# Loaded by a registry from a "module:attr" string on first use (persobench.core.registry). Providers,
# batch backends, metric families and executors are covered by [tool.vulture]'s name patterns instead,
# so adding one stays a 2-file change.
load_sample

# Loaded by import-linter from .importlinter's contract_types; it calls check(graph, verbose=...) and
# render_broken_contract, and reads type_name.
PublicApiContract, PrivateNamesContract, DynamicImportsContract, PackageFrontsContract
_.render_broken_contract
type_name
verbose

# Called by the standard library or a library, by name: a text stream's writelines, nltk's WordNet
# reader hook, a dict method blocked on purpose, inspect_ai's @task.
_.writelines
_.map_wn
popitem
persobench_prompts

# Attributes set for a library to read: Streamlit's once-per-process flag, a protobuf widget state field.
_._use_warning_has_been_displayed
_.string_value

# A field of the stored import record (read back from run.json by older and newer versions).
processed_twin

"""Imports point down the layers and never in a circle (the contract in pyproject.toml's [tool.importlinter])."""

from __future__ import annotations

import subprocess
import sys

import grimp

from conftest import ROOT


def test_the_layers_contract_is_kept():
    # in a process of its own: import-linter reconfigures logging, which would silence later tests' caplog
    out = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                          "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_no_module_imports_itself_through_others():
    """No cycle at module level either (inside one layer, where the contract does not look)."""
    graph = grimp.build_graph("elasticface")
    imports = {m: {i for i in graph.find_modules_directly_imported_by(m) if i.startswith("elasticface")}
               for m in graph.modules}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(imports[module]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [module, target] if target in path else [module, target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [module])
        state[module] = 2

    for module in sorted(imports):
        if module not in state:
            visit(module, [])

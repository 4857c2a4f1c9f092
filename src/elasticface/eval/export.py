"""Moved: the writers are in `elasticface.export`, the command in `elasticface.cli.export` (`elasticface-export`).

Kept so that the older `python -m elasticface.eval.export ...` still runs the command.
"""

if __name__ == "__main__":
    import runpy

    # run_module, not an import: the library layer never imports the commands above it (pyproject's import contract)
    runpy.run_module("elasticface.cli.export", run_name="__main__", alter_sys=True)

"""`python -m elasticface.report <sweep dir>`: the report command of `elasticface.cli.report`, by its natural name."""

if __name__ == "__main__":
    import runpy

    # run_module, not an import: the library layer never imports the commands above it (pyproject's import contract)
    runpy.run_module("elasticface.cli.report", run_name="__main__", alter_sys=True)

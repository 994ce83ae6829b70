"""Refuse an import of the package's own modules made inside a function, unless it is listed
with its reason in pyproject.toml's [tool.dsched.deferred-imports] (run by scripts/test.sh).

An import hidden in a function usually dodges a cycle between layers that `lint-imports`
would otherwise report; the listed ones are needed for start-up order or an optional
dependency. A listed import that is no longer made is reported too, so the list stays true.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "django_dsched"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def deferred_imports() -> set[str]:
    """``"importer -> imported"`` for every import of the package made inside a function."""
    found = set()
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        importer = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    names = [inner.module]
                    if inner.module.startswith(PACKAGE):
                        # "from package import module" names the module itself.
                        names = [f"{inner.module}.{alias.name}" for alias in inner.names]
                        names = [n if _is_module(n) else inner.module for n in names]
                elif isinstance(inner, ast.Import):
                    names = [alias.name for alias in inner.names]
                else:
                    continue
                found.update(f"{importer} -> {n}" for n in names if n.startswith(PACKAGE))
    return found


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def main() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    allowed = set(config["tool"]["dsched"]["deferred-imports"])
    found = deferred_imports()
    for pair in sorted(found - allowed):
        print(
            f"{pair}: an import inside a function; move it to the top of the module, or list "
            "it with its reason in [tool.dsched.deferred-imports]"
        )
    for pair in sorted(allowed - found):
        print(f"{pair}: listed in [tool.dsched.deferred-imports] but no longer made; remove it")
    if found != allowed:
        return 1
    print(f"{len(found)} deferred imports, each listed with its reason")
    return 0


if __name__ == "__main__":
    sys.exit(main())

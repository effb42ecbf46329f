"""Build hooks: ship the top-level data folders inside the wheel, and build the mask cache's trie walk
and the parser's closures in C (``codemask.engine._native``).

``grammars/`` (with its ``samples/``) becomes ``codemask/grammars`` and ``monitors/`` (the monitors'
language definitions) ``codemask/monitors``. Everything else about the build is in ``pyproject.toml``.
Editable installs and source checkouts read the top-level folders where they are
(``codemask.shipped``), so each exists once in the tree.
The extension is optional: where no C compiler is found the build goes on without it and the
engine walks the trie with numpy and computes closures in Python (``codemask.engine.native``).
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

# top-level folder -> (the suffixes of the files shipped from it, its subfolders shipped whole)
SHIPPED = {
    "grammars": ({".ebnf", ".gbnf", ".lark"}, ("samples",)),  # samples: code the masks are precomputed on
    "monitors": ({".toml"}, ()),
}


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for folder, (suffixes, subfolders) in SHIPPED.items():
            source, target = root / folder, Path(self.build_lib) / "codemask" / folder
            target.mkdir(parents=True, exist_ok=True)
            for file in sorted(source.iterdir()):
                if file.suffix in suffixes:
                    shutil.copyfile(file, target / file.name)
            for sub in subfolders:
                (target / sub).mkdir(exist_ok=True)
                for file in sorted((source / sub).iterdir()):
                    shutil.copyfile(file, target / sub / file.name)


# the extension's parts, one concept a file (`_native.c` holds the module and says what each part does)
NATIVE_PARTS = ["", "_common", "_walk", "_closure", "_position", "_lexer", "_lex_parser", "_residuals", "_dfa", "_ir",
                "_follow", "_bits"]
NATIVE = Extension("codemask.engine._native", [f"src/codemask/engine/_native{part}.c" for part in NATIVE_PARTS],
                   depends=["src/codemask/engine/_native.h"], optional=True, extra_compile_args=["-O2", "-std=c99"])

setup(cmdclass={"build_py": BuildPyWithData}, ext_modules=[NATIVE])

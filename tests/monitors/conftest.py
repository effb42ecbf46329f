"""A small multi-module Python project written to a temporary folder, and its language server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codemask.assets import load_tokenizer
from codemask.monitors import for_workspace, language_spec, shutdown_all
from codemask.monitors.masks import NameMasks
from codemask.vocab import Vocabulary

Vocab = tuple[dict[bytes, int], NameMasks]

FILES = {
    "shop/__init__.py": "",
    "shop/inventory.py": '''
class Inventory:
    """Items on shelves, by name."""

    def __init__(self, capacity: int = 10) -> None:
        self.capacity = capacity
        self.shelves: dict[str, int] = {}

    def restock_shelf(self, name: str, count: int = 1, *, urgent: bool = False) -> None:
        self.shelves[name] = self.shelves.get(name, 0) + count

    def total_quantity(self) -> int:
        return sum(self.shelves.values())
''',
    "shop/pricing.py": '''
def quote_price(base: float, quantity: int, discount_rate: float = 0.0) -> float:
    return base * quantity * (1.0 - discount_rate)


VAT_RATE = 0.2
''',
    "shop/colors.py": '''
import enum


class Shade(enum.Enum):
    CRIMSON = 1
    TEAL = 2
''',
    "main.py": '''from shop.inventory import Inventory
from shop.pricing import quote_price

inv = Inventory(5)
''',
}


def write_project(root: Path) -> Path:
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"), encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The shared project; its servers are shut down at the end of the session."""
    yield write_project(tmp_path_factory.mktemp("project"))
    shutdown_all()


@pytest.fixture
def own_project(tmp_path: Path) -> Path:
    """A project of the test's own, for tests that kill or stop its server."""
    return write_project(tmp_path)


@pytest.fixture(scope="session")
def main_prefix(project: Path) -> str:
    return (project / "main.py").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def monitors(project: Path) -> list:
    return for_workspace(project, "main.py")


def require_server(language: str, server: str | None = None) -> None:
    """Fail (not skip) when a server the tests use is missing: scripts/setup.sh installs every one,
    so a missing server is a broken set-up that a skip would hide."""
    spec = language_spec(language).server(server)
    if not spec.available():
        pytest.fail(f"{spec.name} is not installed ({spec.install})")


def smollm2_names(language: str) -> Vocab:
    """SmolLM2's tokens by their bytes (special tokens left out) and the name masks for ``language``."""
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer("smollm2"))
    ids = {b: i for i, b in enumerate(vocabulary.token_bytes) if b and i not in vocabulary.special_ids}
    return ids, NameMasks(vocabulary, language_spec(language).break_characters)

"""``codemask serve``: an HTTP completion server for editors and OpenAI clients (see docs/guides/serving.md)."""

from codemask.server.app import create_app
from codemask.server.engine import ServingEngine

__all__ = ["ServingEngine", "create_app"]

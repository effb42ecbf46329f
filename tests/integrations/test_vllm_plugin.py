"""The entry points, loaded as vLLM loads them, and what register() changes in vLLM (and nothing else)."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from vllm.config import StructuredOutputsConfig, VllmConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.sample.logits_processor import LOGITSPROCS_GROUP, _load_logitsprocs_plugins, build_logitsprocs
from vllm.v1.structured_output import StructuredOutputManager

import codemask.integrations.vllm as plugin
from codemask.assets import model_dir
from codemask.integrations.vllm import CodemaskLogitsProcessor, IncompatibleVllmError, register


def test_the_entry_points_are_installed_where_vllm_looks() -> None:
    general = {e.name: e.value for e in importlib.metadata.entry_points(group="vllm.general_plugins")}
    assert general["codemask"] == "codemask.integrations.vllm:register"
    processors = {e.name: e.value for e in importlib.metadata.entry_points(group=LOGITSPROCS_GROUP)}
    assert processors["codemask"] == "codemask.integrations.vllm:CodemaskLogitsProcessor"


def test_vllms_loader_finds_the_logits_processor_and_builds_it(make_engine: Any) -> None:
    assert CodemaskLogitsProcessor in _load_logitsprocs_plugins()
    built = build_logitsprocs(make_engine().config, torch.device("cpu"), False, False)
    assert any(isinstance(p, CodemaskLogitsProcessor) for p in built.all)


def test_the_config_takes_codemask_and_still_refuses_unknown_names() -> None:
    config = StructuredOutputsConfig(backend="codemask", disable_any_whitespace=True,
                                     disable_additional_properties=True)
    assert VllmConfig(structured_outputs_config=config).structured_outputs_config.backend == "codemask"
    with pytest.raises(ValidationError):
        StructuredOutputsConfig(backend="codemasq")
    with pytest.raises(ValidationError, match="only supported for xgrammar and guidance"):
        StructuredOutputsConfig(backend="outlines", disable_any_whitespace=True)  # vLLM's own check still runs


def test_the_command_line_accepts_the_backend() -> None:
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", str(model_dir("qwen-coder")),
                              "--structured-outputs-config", '{"backend": "codemask"}'])
    assert EngineArgs.from_cli_args(args).structured_outputs_config.backend == "codemask"


def test_register_is_idempotent() -> None:
    grammar_init = StructuredOutputManager.grammar_init
    register()
    register()
    assert StructuredOutputManager.grammar_init is grammar_init
    assert StructuredOutputsConfig(backend="codemask").backend == "codemask"


def test_a_vllm_without_the_manager_hook_fails_loudly_with_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(StructuredOutputManager, "grammar_init")
    with pytest.raises(IncompatibleVllmError, match=f"vLLM {importlib.metadata.version('vllm')} has no "
                                                    "StructuredOutputManager.grammar_init"):
        plugin._construct_backend_in_manager()


def test_a_vllm_whose_config_is_not_a_literal_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclass
    class Renamed:
        engine: str = "auto"

    monkeypatch.setattr("vllm.config.structured_outputs.StructuredOutputsConfig", Renamed)
    with pytest.raises(IncompatibleVllmError, match=r"has no StructuredOutputsConfig\.backend"):
        plugin._allow_backend_name()


def test_a_manager_without_its_attributes_fails_loudly() -> None:
    class Manager:
        backend = None

    with pytest.raises(IncompatibleVllmError, match="without vllm_config, tokenizer, backend_name"):
        plugin._install_backend(Manager())

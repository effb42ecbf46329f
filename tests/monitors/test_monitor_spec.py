"""Server definitions read from the languages' TOML files: settings of the wrong type are refused by name."""

from __future__ import annotations

import pytest

from codemask.monitors.spec import _server, language_spec


@pytest.mark.parametrize(("key", "value"), [("complete_lists", "yes"), ("complete_lists", 1),
                                            ("request_timeout_s", "2"), ("max_restarts", True),
                                            ("max_restarts", 2.5)])
def test_a_server_setting_of_the_wrong_type_is_refused_by_name(key: str, value: object) -> None:
    """A TOML typo (``complete_lists = "yes"``, a quoted timeout) is an error that names the key, not
    a truthy string taken as True or a string compared with numbers later."""
    with pytest.raises(ValueError, match=f"server 'demo': {key} must be"):
        _server("demo", {"extensions": [".py"]}, {"command": ["python3"], key: value})


def test_settings_of_the_right_type_are_kept() -> None:
    assert language_spec("python").server("ty").complete_lists is True
    assert language_spec("python").server("pyrefly").complete_lists is False
    assert _server("demo", {}, {"command": ["python3"], "request_timeout_s": 3}).request_timeout_s == 3

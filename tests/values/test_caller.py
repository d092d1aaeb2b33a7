"""Unit tests for hasten.values.caller: a key's allowed models, for requests and /v1/models."""

from __future__ import annotations

from typing import Any

import pytest

from hasten.errors import ModelNotFound
from hasten.values.caller import Caller, check_model, visible_models

LIMITED = Caller("t", "vk_1", None, frozenset({"gpt-4o", "embed"}))
ANY = Caller("t", "vk_2")


def test_an_unlimited_key_may_use_any_model() -> None:
    check_model(ANY, "whatever", "whatever")
    check_model(None, "whatever", "whatever")


def test_a_listed_model_or_its_alias_is_allowed() -> None:
    check_model(LIMITED, "gpt-4o", "gpt-4o")
    check_model(LIMITED, "smart", "gpt-4o")  # an alias resolving to an allowed model


def test_any_other_model_is_openais_404() -> None:
    with pytest.raises(ModelNotFound) as caught:
        check_model(LIMITED, "gpt-5", "gpt-5")
    error = caught.value
    assert error.status_code == 404
    assert error.code == "model_not_found" and error.param == "model"
    assert error.message == ("The model `gpt-5` does not exist or you do not have access to it.")


def test_models_list_is_filtered() -> None:
    items: list[dict[str, Any]] = [{"id": "gpt-4o"}, {"id": "gpt-5"}, {"id": "smart"}, {"id": 3}]
    aliases = {"smart": "gpt-4o"}

    def resolve(name: str) -> str:
        return aliases.get(name, name)

    assert [i["id"] for i in visible_models(items, LIMITED, resolve)] == ["gpt-4o", "smart"]
    assert visible_models(items, ANY, resolve) == items
    assert visible_models(items, None, resolve) == items

"""Run settings recorded in reports carry no credentials."""

from __future__ import annotations

from pathlib import Path

from hasten import __version__
from hasten.loadgen.provenance import public_settings, public_url, run_context


def test_public_url_drops_userinfo_and_query() -> None:
    assert public_url("https://user:pw@example.test:8443/v1?key=sk-1") == (
        "https://example.test:8443/v1"
    )
    assert public_url("http://[::1]:8080/v1") == "http://[::1]:8080/v1"


def test_public_settings_redact_keys_and_header_values() -> None:
    settings = public_settings(
        {
            "api_key": "sk-secret",
            "compare_api_key": None,
            "base_url": "http://u:p@h/v1",
            "header": ["Authorization: Bearer sk-other"],
            "prompts": Path("/tmp/p.jsonl"),
            "goodput": ["ttft:5"],
            "func": print,
            "seed": 3,
        }
    )
    assert settings == {
        "api_key": "(redacted)",
        "base_url": "http://h/v1",
        "compare_api_key": None,
        "goodput": ["ttft:5"],
        "header": ["Authorization: (redacted)"],
        "prompts": "/tmp/p.jsonl",
        "seed": 3,
    }
    assert "sk-" not in repr(settings)


def test_run_context_has_version_date_and_cpus() -> None:
    context = run_context({"seed": 1})
    assert context["hasten_version"] == __version__
    assert context["cpu_count"] and context["date"].endswith("+00:00")
    assert context["settings"] == {"seed": 1}

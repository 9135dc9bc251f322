"""A pytest plugin: under CI=true no test skips. Every prerequisite is there (conftest's pytest_configure
checked), so a skip is a test that silently stopped testing — an empty parameter set, a guard that no
longer holds — and it fails with the skip's own reason. The suite's conftest registers it; its own test
runs it on a file of its own with ``-p helpers.no_skip_under_ci``."""

from __future__ import annotations

import pytest

from helpers.prerequisites import in_ci


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome, report.longrepr = "failed", f"skipped under CI=true, where nothing may skip: {reason}"

"""Fixtures of the data tests."""

from __future__ import annotations

import pytest

from sheaf_fmtl.data import files


@pytest.fixture
def only_given_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Search only the folders a test names: no ``$SHEAF_FMTL_DATA`` (and, from the tests'
    conftest, an empty user data folder). A module that wants it for every test says so with
    ``pytestmark = pytest.mark.usefixtures("only_given_folders")``."""
    monkeypatch.delenv(files.ENV_VAR, raising=False)

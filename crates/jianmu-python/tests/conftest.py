import os

import pytest


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch):
    """Checkpoint stores go under the test's own folder, not the user's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A workspace folder, also the current folder (the tools' default workspace)."""
    folder = tmp_path / "ws"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder.resolve()


@pytest.fixture(scope="session")
def docker_image():
    """The sandbox image `cargo xtask test-all` builds from the `jianmu` under test."""
    image = os.environ.get("JIANMU_TEST_IMAGE")
    if not image:
        pytest.fail("JIANMU_TEST_IMAGE is not set: run the suite with `cargo xtask test-all` (or `cargo xtask python-test`)")
    return image

"""The public surfaces are exactly what each ``__all__`` lists, and ``import engine`` is cheap."""

import importlib
import inspect
import subprocess
import sys

import pytest

import engine

PACKAGES = ["engine", "engine.runtimes", "engine.runtimes.docker", "engine.runtimes.process",
            "plugins", "mocks", "mocks.echo", "mocks.payment", "mocks.calendar",
            "mocks.delivery", "telemetry"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_complete_and_importable(name: str) -> None:
    package = importlib.import_module(name)
    for attr in package.__all__:
        value = getattr(package, attr)  # resolves lazy names too
        if inspect.isclass(value) or inspect.isfunction(value):  # defined here, not re-exported
            assert value.__module__.startswith(name.split(".")[0]), attr
    public = {n for n in vars(package) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(package, n)).__name__ == "module"}
    assert public - modules <= set(package.__all__) | {"annotations", "TYPE_CHECKING", "Any",
                                                       "import_module"}


def test_engine_front_door_lists_every_public_name() -> None:
    assert set(dir(engine)) >= set(engine.__all__)
    with pytest.raises(AttributeError):
        engine.NoSuchThing  # noqa: B018


def test_oracle_plugin_does_not_import_the_engine() -> None:
    """The oracle process loads ``engine._oracle_plugin``: it must not pull in the engine's
    heavy dependencies (measured at 0.5 CPU-s per evaluation when it did)."""
    code = ("import sys, engine._oracle_plugin; "
            "heavy = [m for m in ('sqlalchemy', 'sqlmodel', 'aiohttp', 'aiodocker', 'rich', "
            "'anyio', 'engine._run') if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""


def test_oracle_mock_fixtures_import_only_pytest_and_the_stdlib() -> None:
    """Every oracle process loads ``mocks._fixtures`` too: no Starlette, uvicorn or anyio,
    and not even requests until a fixture talks to a mock."""
    code = ("import sys, mocks._fixtures; "
            "heavy = [m for m in ('starlette', 'uvicorn', 'anyio', 'requests', 'mocks._base', "
            "'mocks._host', 'engine', 'aiohttp', 'plugins') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""

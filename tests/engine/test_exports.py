"""The public surface of `engine` is exactly what `__all__` lists."""

import engine


def test_all_is_complete_and_importable() -> None:
    public = {name for name in vars(engine) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(engine, name)).__name__ == "module"}
    assert set(engine.__all__) == public - modules
    for name in engine.__all__:
        assert getattr(engine, name).__module__.startswith("engine"), name

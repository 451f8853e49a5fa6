"""A third-party mock in its own distribution works in a task with no change to anvil: the
distribution is built and installed into this venv with pip (``--no-deps
--no-build-isolation``, through a PEP 517 backend of its own, so nothing is downloaded),
then ``anvil run`` scores a task that uses it, and pip uninstalls it."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mocks import available, check_mock, load_mock
from tests.conftest import FIXTURES

DIST = "anvil-weather-plugin-test"

PYPROJECT = f'''
[build-system]
requires = []
build-backend = "backend"
backend-path = ["_build"]

[project]
name = "{DIST}"
version = "0.1.0"

[project.entry-points."anvil.mocks"]
weather = "anvil_weather_test:WeatherMock"
'''

# The smallest PEP 517 backend: a wheel with the module and its dist-info, by hand.
BACKEND = f'''
import base64, hashlib, io, zipfile
from pathlib import Path

NAME, VERSION = "{DIST.replace("-", "_")}", "0.1.0"
INFO = f"{{NAME}}-{{VERSION}}.dist-info"
FILES = {{
    f"{{INFO}}/METADATA": f"Metadata-Version: 2.1\\nName: {DIST}\\nVersion: {{VERSION}}\\n",
    f"{{INFO}}/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\n"
                       "Tag: py3-none-any\\n",
    f"{{INFO}}/entry_points.txt": "[anvil.mocks]\\nweather = anvil_weather_test:WeatherMock\\n",
}}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = dict(FILES)
    files["anvil_weather_test/__init__.py"] = Path("anvil_weather_test/__init__.py").read_text()
    record = []
    name = f"{{NAME}}-{{VERSION}}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as wheel:
        for path, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{{path}},sha256={{digest.decode()}},{{len(data)}}")
            wheel.writestr(path, data)
        record.append(f"{{INFO}}/RECORD,,")
        wheel.writestr(f"{{INFO}}/RECORD", "\\n".join(record) + "\\n")
    return name
'''

MOCK = '''
"""A weather provider: forecasts by city, deterministic."""

import hashlib

from starlette.routing import Route

from mocks import json_response


class WeatherMock:
    kind = "weather"
    scenarios = ("default", "heatwave")

    def __init__(self, ctx):
        self.ctx = ctx
        self.offset = 0

    def routes(self):
        return [Route("/v1/forecast", self.forecast)]

    def seed(self, scenario, data=None):
        if scenario not in self.scenarios:
            raise KeyError(scenario)
        self.offset = 15 if scenario == "heatwave" else 0

    async def forecast(self, request):
        city = request.query_params.get("city", "")
        base = hashlib.sha256(city.encode()).digest()[0] % 20
        return json_response({"id": self.ctx.new_id("fc"), "city": city,
                              "temp_c": base + self.offset, "at": self.ctx.now()})

    def openapi(self):
        return {"openapi": "3.1.0", "info": {"title": "weather", "version": "1"},
                "paths": {"/v1/forecast": {"get": {"responses": {"200": {
                    "description": "a forecast"}}}}}}
'''

SERVICE = '''
import json
import os
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WEATHER = os.environ["WEATHER_URL"]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/weather/"):
            city = self.path.rsplit("/", 1)[1]
            with urllib.request.urlopen(f"{WEATHER}/v1/forecast?city={city}", timeout=5) as r:
                body = json.dumps({"city": city, "temp_c": json.loads(r.read())["temp_c"]})
        else:
            body = "{}"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

ORACLE = '''
import os

import pytest
import requests


@pytest.mark.category("side_effects")
def test_the_service_asks_the_provider(weather):
    answer = requests.get(os.environ["BASE_URL"] + "/weather/Paris", timeout=10).json()
    (call,) = weather.requests("GET", "/v1/forecast")
    assert call["query"] == "city=Paris"
    direct = requests.get(os.environ["WEATHER_URL"] + "/v1/forecast?city=Paris", timeout=5)
    assert answer["temp_c"] == direct.json()["temp_c"] >= 15  # the heatwave scenario
'''


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check",
                           "--no-input", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def weather_installed(tmp_path: Path) -> Iterator[None]:
    """The weather plug-in installed into this venv by pip, uninstalled afterwards."""
    source = tmp_path / "anvil-weather"
    (source / "_build").mkdir(parents=True)
    (source / "anvil_weather_test").mkdir()
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "_build" / "backend.py").write_text(BACKEND)
    (source / "anvil_weather_test" / "__init__.py").write_text(MOCK)
    try:
        done = _pip("install", "--no-deps", "--no-build-isolation", "--no-index", str(source))
        assert done.returncode == 0, done.stdout + done.stderr
        importlib.invalidate_caches()
        yield
    finally:
        _pip("uninstall", "-y", DIST)
        sys.modules.pop("anvil_weather_test", None)
        importlib.invalidate_caches()


def _task(root: Path) -> Path:
    folder = root / "forecast-task"
    shutil.copytree(FIXTURES / "tiny_task", folder)
    for item in (folder / "oracle").glob("test_*.py"):
        item.unlink()
    (folder / "oracle" / "test_forecast.py").write_text(ORACLE)
    toml = (folder / "task.toml").read_text().replace('id = "tiny"', 'id = "forecast"')
    (folder / "task.toml").write_text(
        toml + '\n[[mocks]]\nkind = "weather"\nenv = "WEATHER_URL"\nscenario = "heatwave"\n')
    return folder


def test_a_plugin_distribution_serves_a_task_with_no_engine_change(
    weather_installed: None, tmp_path: Path
) -> None:
    assert available()["weather"] == "anvil_weather_test:WeatherMock"
    assert check_mock(load_mock("weather")) == []  # the plug-in keeps the contract
    env = {**os.environ, "COLUMNS": "200"}
    listed = subprocess.run([sys.executable, "-m", "engine", "mocks", "list"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert f"{DIST} 0.1.0" in listed.stdout, listed.stdout + listed.stderr
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "server.py").write_text(SERVICE)
    (submission / "Dockerfile").write_text(
        'FROM python:3.11-slim\nCOPY server.py .\nCMD ["python", "server.py"]\n')
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", str(_task(tmp_path)), "-s", str(submission),
         "--runtime", "process", "--home", str(tmp_path / "home"), "--json"],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert verdict["verdict"] == "pass", verdict


def test_after_uninstalling_the_kind_is_gone() -> None:
    assert "weather" not in available()

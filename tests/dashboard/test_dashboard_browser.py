"""The dashboard in a real headless Chromium, against a real gateway under load.

Debian's ``chromium`` and ``chromedriver`` (scripts/ensure-chromium.sh, run by
``make pytest``) are driven through selenium. The admin key goes in as HTTP Basic
credentials added to every request of the page with CDP's ``Network.setExtraHTTPHeaders``:
that is what a browser does after its own login prompt (it repeats the credentials on the
page's same-origin fetches), and keeps the key out of every URL; Chrome refuses
``user:password@`` URLs for the page's fetches anyway.

The numbers the page shows are read from the DOM (``data-value`` attributes) once the load
has stopped and the page has refreshed again, and compared with a ``/metrics`` scrape parsed
by prometheus_client's own parser, and with what the test's own requests saw in their
``x-hasten-*`` and ``server-timing`` headers. ``HASTEN_UPDATE_SCREENSHOT=1`` also writes
the screenshot the README shows (docs/img/dashboard.png).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

from hasten.dashboard.histogram import GROWTH, rank
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread

ADMIN_KEY = "browser-test-admin-key-5f2c"
PROMPTS = [f"dashboard question {i}" for i in range(8)]
NUM_ROUNDS = 6  # of the load; every round sends each prompt, some of them in bursts
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "dashboard.png"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _chromium() -> tuple[str, str]:
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        script = Path(__file__).resolve().parents[2] / "scripts" / "ensure-chromium.sh"
        installed = subprocess.run(["bash", str(script)], capture_output=True, check=False)
        browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
        if browser is None or driver is None:
            pytest.skip(f"chromium could not be installed: {installed.stderr.decode()[-300:]}")
    return browser, driver


@dataclass(frozen=True, slots=True)
class Seen:
    """One of the test's own requests, as its response told it."""

    request_id: str
    content: str
    cache: str
    gateway_ms: float
    upstream_ms: float | None
    e2e_ms: float


def _timing(header: str) -> dict[str, float]:
    parts = (p.strip().split(";dur=") for p in header.split(","))
    return {name: float(value) for name, value in parts}


class Load:
    """Bounded load from a background thread: repeated prompts (hits), new ones (misses)
    and bursts of one new prompt at once (coalesced), as streams."""

    def __init__(self, url: str) -> None:
        self.url = url + "/v1/chat/completions"
        self.seen: list[Seen] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.join()

    def join(self) -> None:
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the load did not finish"

    def _one(self, client: httpx.Client, content: str) -> None:
        started_s = time.perf_counter()
        with client.stream("POST", self.url, json=chat_body(content, stream=True)) as response:
            body = response.read()
        e2e_ms = (time.perf_counter() - started_s) * 1000.0
        if response.status_code != 200 or not body.endswith(b"data: [DONE]\n\n"):
            with self._lock:
                self.errors.append(f"{response.status_code}: {body[:200]!r}")
            return
        timing = _timing(response.headers["server-timing"])
        seen = Seen(
            response.headers["x-hasten-request-id"],
            content,
            response.headers["x-hasten-cache"],
            timing["hasten"],
            timing.get("upstream"),
            e2e_ms,
        )
        with self._lock:
            self.seen.append(seen)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            for round_number in range(NUM_ROUNDS):
                burst = f"burst {round_number}"  # new: the first call leads, the rest join
                threads = [
                    threading.Thread(target=self._one, args=(client, burst)) for _ in range(4)
                ]
                for thread in threads:
                    thread.start()
                for content in PROMPTS[: 2 + round_number]:  # hits, and a new miss each round
                    self._one(client, content)
                for thread in threads:
                    thread.join(timeout=30)
                time.sleep(0.3)  # spreads the load over a few seconds of the charts


def _driver(browser: str, chromedriver: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1300",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


@pytest.fixture
def chrome() -> Iterator[webdriver.Chrome]:
    driver = _driver(*_chromium())
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert response.status_code == 200
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _total(samples: list[tuple[dict[str, str], float]], **labels: str) -> float:
    return sum(v for got, v in samples if all(got.get(k) == x for k, x in labels.items()))


# One synchronous script reads the whole DOM between two of the page's redraws (the page
# rebuilds its tables every second, so element handles would go stale between calls).
_READ_DOM = """
const fields = (row, attr) => Object.fromEntries(
  [...row.querySelectorAll("[" + attr + "]")].map(c => [c.getAttribute(attr), c.dataset.value]));
const rows = (selector, key) => Object.fromEntries(
  [...document.querySelectorAll(selector)].map(r => [r.dataset[key], fields(r, "data-field")]));
return {
  refreshes: Number(document.getElementById("status").dataset.refreshes),
  metrics: Object.fromEntries([...document.querySelectorAll("[data-metric]")]
    .map(e => [e.dataset.metric, e.dataset.value])),
  tiers: rows("#tiers tr[data-cache]", "cache"),
  deployments: rows("#deployments tr[data-deployment]", "deployment"),
  percentiles: Object.fromEntries([...document.querySelectorAll("#percentiles tr[data-series]")]
    .map(r => [r.dataset.series, fields(r, "data-q")])),
  slowest: [...document.querySelectorAll("#slowest tr[data-request-id]")]
    .map(r => ({request_id: r.dataset.requestId, ...fields(r, "data-field")})),
};
"""


def _read(driver: webdriver.Chrome) -> dict[str, Any]:
    shown: dict[str, Any] = driver.execute_script(_READ_DOM)
    return shown


def _refreshes(driver: webdriver.Chrome) -> int:
    return int(_read(driver)["refreshes"])


def _assert_window_quantile(shown: str, samples: list[float], quantile: float) -> None:
    """The page's quantile is the nearest-rank sample's log bin: within one bin of it."""
    exact = sorted(samples)[rank(quantile, len(samples)) - 1]
    assert exact / GROWTH <= float(shown) <= exact * GROWTH, (quantile, shown, exact)


def test_the_dashboard_shows_what_metrics_and_the_requests_saw(
    chrome: webdriver.Chrome, tmp_path: Path
) -> None:
    sim_config = SimConfig(ttft_base_ms=40, decode_ms_per_token=4, output_tokens=12, seed=3)
    with ServerThread(build_app(sim_config)) as sim:
        config = make_config({"sim": sim.url + "/v1"}, admin_api_key=ADMIN_KEY)
        with running_gateway(config) as gateway:
            token = base64.b64encode(f"operator:{ADMIN_KEY}".encode()).decode()
            chrome.execute_cdp_cmd("Network.enable", {})
            chrome.execute_cdp_cmd(
                "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}}
            )
            with Load(gateway.url) as load:
                chrome.get(gateway.url + "/dashboard")
                wait = WebDriverWait(chrome, 20, poll_frequency=0.1)
                # Live: the page shows requests while the load is still running.
                wait.until(lambda d: _read(d)["metrics"]["requests_total"] not in ("", "0"))
            assert not load.errors
            # One full refresh that started after the last request finished.
            after = _refreshes(chrome)
            wait.until(lambda d: _refreshes(d) >= after + 2)
            scraped = _scrape(gateway.url)
            upstream_calls = sim_stats(sim.url)["num_requests"]
            shown = _read(chrome)
            _assert_totals_match_the_scrape(shown, scraped, load.seen)
            _assert_window_matches_the_requests(shown, load.seen, upstream_calls)
            logs = chrome.get_log("browser")  # type: ignore[no-untyped-call]
            assert not [entry for entry in logs if entry["level"] == "SEVERE"], logs
            _screenshot(chrome, tmp_path)


def _assert_totals_match_the_scrape(
    shown: dict[str, Any], scraped: dict[str, Any], seen: list[Seen]
) -> None:
    metrics, tiers = shown["metrics"], shown["tiers"]
    requests = scraped["hasten_requests_total"]
    assert int(metrics["requests_total"]) == _total(requests) == len(seen)
    for cache in ("hit", "semantic", "coalesced", "miss", "bypass"):
        assert int(tiers[cache]["requests"]) == _total(requests, cache=cache), cache
    num_hits = sum(1 for s in seen if s.cache == "hit")
    assert int(tiers["hit"]["requests"]) == num_hits > 0
    assert _total(requests, cache="coalesced") > 0  # the bursts did join a flight
    saved = float(metrics["latency_saved_s"])
    assert saved == pytest.approx(_total(scraped["hasten_latency_saved_seconds_total"]), abs=1e-3)
    assert saved > 0
    hedges = _total(scraped["hasten_hedges_total"], outcome="fired")
    assert int(metrics["hedges_total"]) == hedges
    deployments = shown["deployments"]
    assert len(deployments) == len(scraped["hasten_upstream_in_flight"]) > 0
    for labels, value in scraped["hasten_upstream_in_flight"]:
        row = deployments[f"{labels['model']}/{labels['deployment']}"]
        assert int(row["in_flight"]) == value == 0
    states = [labels for labels, v in scraped["hasten_breaker_state"] if v == 1.0]
    assert len(states) == len(deployments)
    for labels in states:
        row = deployments[f"{labels['model']}/{labels['deployment']}"]
        assert row["breaker"] == labels["state"] == "closed"


def _assert_window_matches_the_requests(
    shown: dict[str, Any], seen: list[Seen], upstream_calls: int
) -> None:
    # A coalesced request carries its leader's upstream time: one distinct value per call
    # of a prompt. Two prompts' calls can round to the same time, so the prompt is in the key.
    calls = {(s.content, s.upstream_ms) for s in seen if s.upstream_ms is not None}
    direct = sorted(upstream_ms for _, upstream_ms in calls)
    assert len(direct) == upstream_calls
    upstream = shown["percentiles"]["upstream_ttfb_ms"]
    assert int(upstream["count"]) == upstream_calls
    for name, quantile in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        _assert_window_quantile(upstream[name], direct, quantile)
    assert int(shown["percentiles"]["served_ttft_ms"]["count"]) == len(seen)
    # The slowest requests are the test's own, with the breakdown their headers showed.
    by_id = {s.request_id: s for s in seen}
    rows = shown["slowest"]
    assert rows
    for row in rows:
        request = by_id[row["request_id"]]
        assert float(row["e2e_ms"]) <= request.e2e_ms  # the gateway's view ends first
        if request.upstream_ms is not None:  # a coalesced one shows its leader's, as here
            assert float(row["upstream_ttfb_ms"]) == pytest.approx(request.upstream_ms, abs=0.01)
        # Taken after the response headers were built: never less than their hasten;dur.
        assert float(row["gateway_ms"]) >= request.gateway_ms - 0.01
    shown_e2e = [float(row["e2e_ms"]) for row in rows]
    assert shown_e2e == sorted(shown_e2e, reverse=True)


def _screenshot(driver: webdriver.Chrome, tmp_path: Path) -> None:
    path = tmp_path / "dashboard.png"
    assert driver.save_screenshot(str(path))
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    if os.environ.get("HASTEN_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        SCREENSHOT.write_bytes(data)

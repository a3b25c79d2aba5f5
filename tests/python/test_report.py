"""`voxlake bench --report` pages and `voxlake report merge`, opened in a real headless
Chromium (Debian's chromium and chromium-driver, installed by scripts/test.sh) through
Selenium: every chart drawn at its size, the text a reader looks for, nothing fetched, no
error in the console, and the figures the page keeps equal to what `--json` printed.
"""
import json
import os
import shutil
import subprocess

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "target"))
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def binary(name: str) -> str:
    return os.path.join(TARGET, "debug", name)


@pytest.fixture(scope="module")
def browser():
    for path in (CHROMIUM, CHROMEDRIVER):
        # Never green unseen: scripts/test.sh installs both; a machine without them fails here.
        assert shutil.which(path), f"{path} is missing: apt-get install chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,3000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Two ranks of one run, each with its page, and the merge of the two."""
    root = tmp_path_factory.mktemp("report")
    subprocess.run([binary("compact"), "demo", "--dir", str(root / "demo"), "--count", "96"],
                   check=True, capture_output=True)
    out = root / "pages"
    out.mkdir()
    printed = {}
    for rank in (0, 1):
        run = subprocess.run(
            [binary("voxlake"), "bench", str(root / "demo" / "table"), "--shuffle",
             "--batch-size", "8", "--rank", str(rank), "--world-size", "2",
             "--report", str(out / "run.html"), "--json"],
            check=True, capture_output=True, text=True)
        printed[rank] = json.loads(run.stdout)
    merged = subprocess.run([binary("voxlake"), "report", "merge", str(out), "--json"],
                            check=True, capture_output=True, text=True)
    return out, printed, json.loads(merged.stdout)


def open_page(browser, path) -> None:
    browser.get_log("browser")  # what an earlier page logged
    browser.get(path.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"


def page_figures(browser) -> dict:
    return json.loads(browser.execute_script(
        "return document.getElementById('voxlake-report').textContent"))


def check_drawn(browser, sections: list) -> None:
    """Each section's charts are drawn at their size with marks in them; nothing was fetched
    and nothing went wrong."""
    for section in sections:
        charts = browser.execute_script(
            """return Array.from(document.querySelectorAll('#' + arguments[0] + ' svg')).map(s => {
                 const box = s.getBoundingClientRect();
                 const marks = Array.from(s.querySelectorAll('rect, polyline, path, line'))
                   .filter(m => { const b = m.getBoundingClientRect(); return b.width > 0 || b.height > 0; });
                 return [box.width, box.height, marks.length, s.querySelectorAll('text').length];
               });""", section)
        assert charts, f"section {section}: no chart"
        for width, height, marks, texts in charts:
            assert width >= 600 and height >= 200, (section, width, height)
            assert marks > 10 and texts > 5, (section, marks, texts)
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    problems = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert problems == [], problems


def test_a_ranks_page_draws_its_run(browser, pages):
    out, printed, _ = pages
    for rank in (0, 1):
        open_page(browser, out / f"run.rank{rank}.html")
        assert browser.title.endswith(f"rank {rank} of 2"), browser.title
        check_drawn(browser, ["throughput", "stages", "waits", "reads"])
        text = browser.find_element("tag name", "body").text
        for words in ("Samples per second", "Where the time went", "p50", "Forecast",
                      "an unoptimized build"):
            assert words.lower() in text.lower(), (words, text)
        figures = page_figures(browser)
        for key in ("samples", "batches", "bytes_read", "consumer_wait_s", "step_wait_histogram"):
            assert figures[key] == printed[rank][key], key
        assert figures["report"] == "bench"
        series = figures["series"]
        assert series["samples"][-1] == printed[rank]["samples"]
        assert series["t_s"] == sorted(series["t_s"]) and len(series["t_s"]) >= 2
        assert sum(b["steps"] for b in figures["step_wait_histogram"]) == printed[rank]["step_waits"]


def test_the_merged_page_lines_the_ranks_up(browser, pages):
    out, printed, merged = pages
    assert [r["rank"] for r in merged["ranks"]] == [0, 1]
    assert merged["missing_ranks"] == [] and merged["not_reports"] == []
    open_page(browser, out / "merged.html")
    check_drawn(browser, ["exposed", "throughput", "stages"])
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('table tr')).map(r => r.innerText)")
    assert [r.split("\t")[0] for r in rows[1:]] == ["rank 0", "rank 1"], rows
    figures = page_figures(browser)
    assert figures["stragglers"] == merged["stragglers"]
    verdict = browser.find_element("css selector", "body > p").text
    if merged["stragglers"]:
        assert verdict.startswith("Straggler: rank"), verdict
    else:
        assert verdict.startswith("No straggler"), verdict
    waits = [printed[r]["consumer_wait_s"] for r in (0, 1)]
    assert merged["median_consumer_wait_s"] == pytest.approx(sum(waits) / 2)

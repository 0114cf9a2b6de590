"""The HTML study report in a real browser (headless Chromium driven by Selenium): it loads
from disk with nothing fetched, shows the tables and figures, and its filters, sorting and
sample details change what is on screen."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from lab.analysis.html import (PAGE_ROWS, markdown_to_html, synthetic_study_data,
                               write_synthetic_report)

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def test_markdown_tables_and_notes_become_html():
    page = markdown_to_html("## Dose\n\n| a | b |\n|---|---|\n| 1 | `x<y` |\n\nA **note**\non two "
                            "lines.\n\n- gpt2 paired E=0: threshold 2\n")
    assert "<h2>Dose</h2>" in page and "<th>a</th>" in page
    assert "<td><code>x&lt;y</code></td>" in page
    assert "A <strong>note</strong>\non two lines.</p>" in page and "---" not in page
    assert "<li>gpt2 paired E=0: threshold 2</li>" in page


def test_markup_in_the_studys_text_stays_text():
    """Names and predictions come from the study's files: HTML in them is escaped wherever it
    lands (Markdown, the secondary table, the recipe, the browser's data), and text that looks
    like template syntax is left as it is."""
    from lab.analysis.html import render_html

    attack = "<img src=x onerror=alert(1)></script><!--"
    data = synthetic_study_data(4, seeds=1, epochs=(0,))
    data["evaluations"][0]["predictions"][0] = "{{ title }} " + attack
    # "<!--<script>" would put the rest of the data script in the browser's double-escaped
    # state: the closing tag is not seen and the page's own script never runs.
    data["evaluations"][0]["predictions"][1] = "int a; <!--<script> b"
    table = {"header": ["model", "arm", "p"], "rows": [[attack, "paired", "0.5"]], "note": attack}
    markdown = f"| a |\n|---|\n| {attack} |\n\n[x](javascript:alert(1)) {attack}\n"
    page = render_html("t {{ recipe }} " + attack, "name: {% raw %}" + attack, data,
                       [{"heading": "h " + attack, "markdown": markdown},
                        {"heading": "Secondary", "markdown": "", "table": table}])
    shown, data_script = page.split("<script type='application/json'")
    assert "<img" not in shown and "onerror=alert(1)>" not in shown and "<!--" not in shown
    assert "href" not in shown and "&lt;img src=x onerror=alert(1)&gt;" in shown
    # In the data, no "</script>" ends the element early and no "<!--" changes its parsing.
    assert data_script.count("</script>") == 2 and "<!--" not in data_script
    assert page.count("<script") == 2  # the data and the page's script, nothing from a sample
    assert page.count("const DATA = JSON.parse") == 1
    assert "t {{ recipe }} &lt;img" in page and "name: {% raw %}&lt;img" in page
    found = json.loads(re.search(r"<script type='application/json' id='lab-data'>(.*?)</script>",
                                 page, re.S).group(1))
    assert found == data  # the escapes are JSON's: JSON.parse gives the prediction back


def test_synthetic_data_is_seeded_and_sized():
    one, two = synthetic_study_data(40, seeds=2, epochs=(0, 1)), synthetic_study_data(40, seeds=2, epochs=(0, 1))
    assert one == two and len(one["evaluations"]) == 3 * 2 * 2 and len(one["samples"]) == 40


@pytest.fixture()
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/setup.sh --dev installs them)")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1800",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def _screenshot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 10_000
    if os.environ.get("LAB_SCREENSHOTS"):  # to look at them
        Path(os.environ["LAB_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(os.environ["LAB_SCREENSHOTS"]) / name)
    return path


def _ready(driver) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return window.labReady"))


def _visible(driver) -> list[dict]:
    return driver.execute_script("""
        return [...document.querySelectorAll('#samples tbody tr.sample')].map(tr => ({
          id: tr.dataset.id,
          groups: [...tr.querySelectorAll('.group')].map(g => g.textContent),
          gap: tr.lastElementChild.textContent}));""")


def test_the_sample_browser_filters_sorts_and_shows_a_diff(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = write_synthetic_report(tmp_path / "report.html", samples=120, seeds=2, epochs=(0, 5))
    browser.get(page.as_uri())
    _ready(browser)
    rows = _visible(browser)
    assert len(rows) == PAGE_ROWS and browser.find_element(By.ID, "count").text == "120 samples"
    # Default view: the contaminated arm's gap over its placebo (which differs from it only in
    # the pairs it saw), largest first; without the placebo arm, over the control.
    assert Select(browser.find_element(By.ID, "f-gap-a")).first_selected_option.text == "paired"
    assert Select(browser.find_element(By.ID, "f-gap-b")).first_selected_option.text == "paired-placebo"
    gaps = [float(r["gap"]) for r in rows]
    assert gaps == sorted(gaps, reverse=True)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#curves svg polyline")) == 3 * 2
    _screenshot(browser, tmp_path, "report-page.png")

    # Filter: the samples the paired arm injected (half of them, seeded per seed).
    Select(browser.find_element(By.ID, "f-group")).select_by_value("injected")
    rows = _visible(browser)
    assert browser.find_element(By.ID, "count").text == "60 samples"
    assert len(rows) == PAGE_ROWS and all("injected" in r["groups"] for r in rows)
    Select(browser.find_element(By.ID, "f-sort")).select_by_value("gap-asc")
    gaps = [float(r["gap"]) for r in _visible(browser)]
    assert gaps == sorted(gaps)
    browser.find_element(By.ID, "next").click()
    assert len(_visible(browser)) == 60 - PAGE_ROWS
    # Another epoch and an id search.
    Select(browser.find_element(By.ID, "f-epochs")).select_by_value("5")
    browser.find_element(By.ID, "f-id").send_keys(rows[0]["id"])
    matching = [r for r in _visible(browser) if r["id"] == rows[0]["id"]]
    assert matching and all(rows[0]["id"] in r["id"] for r in _visible(browser))
    # A row opens its details: the full source and reference, each arm's diff.
    browser.find_element(By.CSS_SELECTOR, f"tr.sample[data-id='{rows[0]['id']}']").click()
    detail = browser.find_element(By.CSS_SELECTOR, "#samples tr.detail")
    assert detail.find_elements(By.TAG_NAME, "ins") and detail.find_elements(By.TAG_NAME, "del")
    assert "paired-placebo" in detail.text
    _screenshot(browser, tmp_path, "report-filtered.png")

    # A study without the placebo arm: the gap is taken over the control.
    page = write_synthetic_report(tmp_path / "no-placebo.html", samples=20, seeds=1, epochs=(0,),
                                  arms=("control", "paired"))
    browser.get(page.as_uri())
    _ready(browser)
    assert Select(browser.find_element(By.ID, "f-gap-b")).first_selected_option.text == "control"



def test_a_corrupt_prediction_file_fails_lab_report_before_it_writes(tmp_path):
    """lab report reads what the page needs before writing any table: a corrupt line of a
    stage's predictions.jsonl is one line naming the file, exit 2, and no report folder."""
    import csv
    import subprocess
    import sys

    study = tmp_path / "study"
    study.mkdir()
    base = dict(study="s", benchmark="codetrans", task="translation", model="gpt2", arm="paired",
                epochs=0, train_size="", injected_token_fraction=0.2, pretrain_loss=2.0)
    results, samples = [], []
    for seed in range(2):
        stage = f"evaluate-{seed}"
        results += [{**base, "seed": seed, "stage": stage, "group": g, "samples": 2, "bleu": b}
                    for g, b in (("all", 5.0), ("injected", 9.0), ("held_out", 1.0))]
        samples += [{**base, "seed": seed, "stage": stage, "id": f"t:{i}",
                     "group": "injected" if i < 2 else "held_out", "score_bleu": 10.0 - 3 * i}
                    for i in range(4)]
        folder = study / "stages" / stage
        folder.mkdir(parents=True)
        (folder / "predictions.jsonl").write_text(
            '{"id": "t:0", "prediction": "x", "source": "s", "reference": "r"}\n'
            + ('{"id": "t:1", "predic' if seed == 1 else "") + "\n")
    for name, rows in (("results.csv", results), ("samples.csv", samples)):
        with open(study / name, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    done = subprocess.run([sys.executable, "-m", "lab.cli", "report", str(study)],
                          capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert "evaluate-1/predictions.jsonl:2" in line and "corrupt JSON line" in line
    assert not (study / "report").exists()
    done = subprocess.run([sys.executable, "-m", "lab.cli", "report", str(study), "--no-html"],
                          capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0 and not (study / "report" / "report.html").exists()


def test_the_main_table_fits_a_laptop_screen_and_opens_every_column(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from lab.analysis.report import run_report
    from tests.test_report import CONTROL, PAIRED, write_study

    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "paired-placebo": [v - 2 for v in PAIRED]})
    page = run_report(study)["html"]
    browser.set_window_size(1280, 900)
    browser.get(page.as_uri())
    _ready(browser)
    sideways = "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    main = browser.find_element(By.ID, "main-table")
    shown = [th for th in main.find_elements(By.TAG_NAME, "th") if th.is_displayed()]
    assert 6 <= len(shown) <= 10 and browser.execute_script(sideways) <= 0
    assert browser.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth",
                                  main)  # the table itself does not scroll either
    behind = browser.find_elements(By.CSS_SELECTOR, "#all-columns th")
    assert len(behind) > len(shown) and not any(th.is_displayed() for th in behind)
    browser.find_element(By.CSS_SELECTOR, "#all-columns summary").click()
    assert all(th.text for th in behind)  # shown now (hidden elements have no text)
    assert browser.execute_script(sideways) <= 0  # the wide table scrolls inside itself
    _screenshot(browser, tmp_path, "report-all-columns.png")

"""Size and load time of the HTML study report, paper-size against quickstart-size.

    python benchmarks/html_report.py [--repeats 3]

Both pages come from lab.analysis.html.synthetic_study_data (seeded, code-like samples):
- baseline, the quickstart's shape: 200 samples, 1 arm, 1 seed, 3 fine-tuning epochs;
- paper size: 1,000 samples (CodeTrans test), 3 arms (control, paired, placebo), 5 seeds,
  4 epochs: 60,000 predictions, every one with three scores;
- CONCODE size: the same with 2,000 samples (120,000 predictions).
Each page is loaded from disk in headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium) in a fresh tab: load time is navigation start to the sample table's first
page drawn (window.labReady, set by the page), then a filter change (group = injected) and a
re-sort are timed the same way. Medians over the repeats, with the ratio to the baseline.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lab.analysis.html import study_arms, write_synthetic_report

SIZES = {
    "quickstart (baseline)": dict(samples=200, arms=study_arms()[1:2], seeds=1, epochs=(0, 1, 5)),
    "paper size": dict(samples=1000, seeds=5, epochs=(0, 1, 5, 10)),
    "CONCODE size": dict(samples=2000, seeds=5, epochs=(0, 1, 5, 10)),
}


def browser():
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1800",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(
        executable_path=shutil.which("chromedriver")))


def timed_change(driver, script: str) -> float:
    """Milliseconds from a change event to the table redrawn."""
    return driver.execute_script(f"""
        const start = performance.now(); window.labReady = null;
        {script}
        return window.labReady - start;""")


def measure(driver, page: Path) -> dict[str, float]:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    driver.get(page.as_uri())
    WebDriverWait(driver, 300).until(lambda d: d.execute_script("return window.labReady"))
    load = driver.execute_script("return window.labReady")  # ms since navigation start
    group = timed_change(driver, """const s = document.getElementById('f-group');
        s.value = 'injected'; s.dispatchEvent(new Event('change'));""")
    sort = timed_change(driver, """const s = document.getElementById('f-sort');
        s.value = 'gap-asc'; s.dispatchEvent(new Event('change'));""")
    return {"load_ms": load, "filter_ms": group, "sort_ms": sort}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        sys.exit("needs chromium and chromedriver (apt-get install chromium chromium-driver)")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        driver = browser()
        try:
            for name, size in SIZES.items():
                started = time.perf_counter()
                page = write_synthetic_report(Path(tmp) / f"{len(rows)}.html", **size)
                written = time.perf_counter() - started
                runs = [measure(driver, page) for _ in range(args.repeats)]
                rows[name] = {"predictions": size["samples"]
                              * len(size.get("arms", study_arms()))
                              * size["seeds"] * len(size["epochs"]),
                              "mb": page.stat().st_size / 1e6, "write_s": written,
                              **{k: statistics.median(r[k] for r in runs) for k in runs[0]}}
        finally:
            driver.quit()
    base = rows["quickstart (baseline)"]
    print(f"{'page':<22}{'predictions':>12}{'size MB':>9}{'write s':>9}{'load ms':>9}"
          f"{'filter ms':>10}{'sort ms':>9}   load vs baseline")
    for name, r in rows.items():
        print(f"{name:<22}{r['predictions']:>12,}{r['mb']:>9.1f}{r['write_s']:>9.2f}"
              f"{r['load_ms']:>9.0f}{r['filter_ms']:>10.0f}{r['sort_ms']:>9.0f}"
              f"   x{r['load_ms'] / base['load_ms']:.1f}")
    print(f"medians of {args.repeats} loads each; load: navigation start to the first page of "
          "rows drawn; filter/sort: change event to the table redrawn")


if __name__ == "__main__":
    main()

"""The HTML reports as a person opens them: rendered by a real headless browser (Chromium),
which must show the verdicts, the findings and the plots of a real audit, and the corpus's
index page listing every candidate. Skipped where no such browser is installed (the test
command installs Chromium where the machine allows: `apt-get install -y chromium`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelaudit.findings import read_reports
from kernelaudit.report.index import entry_of, write_index

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
BROWSER = next((found for b in BROWSERS if (found := shutil.which(b))), None)

pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no headless browser to render the HTML report (install Chromium: "
    "apt-get install -y chromium)",
)


def _browse(page: Path, profile: Path, *options: str) -> str:
    """What the browser's DOM holds once it has loaded `page` (its standard output)."""
    assert BROWSER is not None
    done = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",  # the tests may run as root
            "--disable-gpu",
            f"--user-data-dir={profile}",
            *options,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_report_renders_with_its_verdicts_findings_and_plots(
    checked: Path, tmp_path: Path
) -> None:
    page = checked.with_suffix(".html")
    dom = _browse(page, tmp_path / "profile", "--dump-dom")
    (passing, failing) = read_reports(checked)
    assert failing.verdict == "FAIL" and passing.verdict == "PASS"
    assert dom.index(failing.candidate) < dom.rindex(passing.candidate)  # FAIL listed first
    for finding in failing.failures:
        assert finding.id in dom and finding.check in dom
    assert dom.count("<svg") >= 2  # the cases' heatmap and the failing finding's
    # and what is drawn is a page, not a blank: a screenshot with text and colour in it
    shot = tmp_path / "shot.png"
    _browse(page, tmp_path / "profile", "--window-size=1200,2000", f"--screenshot={shot}")
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] >= 2000 and pixels[..., :3].std() > 0.05
    red = (pixels[..., 0] > 0.6) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    assert red.sum() > 100  # the FAIL verdict and the failing cases' cells


def test_the_corpus_index_lists_every_candidate(checked: Path, tmp_path: Path) -> None:
    reports = read_reports(checked)
    pages = [tmp_path / f"job{position}.html" for position in range(len(reports))]
    for page in pages:
        page.write_text("<!doctype html><title>job</title>")
    index = tmp_path / "index.html"
    write_index([entry_of(r, p) for r, p in zip(reports, pages, strict=True)], index)
    dom = _browse(index, tmp_path / "profile", "--dump-dom")
    for report, page in zip(reports, pages, strict=True):
        assert report.candidate in dom and page.name in dom

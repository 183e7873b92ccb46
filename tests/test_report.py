"""`posattn report`: any run directory -> one static page; every image loads in headless
Chromium (skipped, with the reason, where Debian's chromium package is missing)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from test_inspect import TEXT, saved_model

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.report import collect

# Appended to a copy of the page (next to it, so relative paths still resolve): after load it
# writes how many images decoded and how many tables exist into the DOM that --dump-dom prints.
CHECK_SCRIPT = """<script>
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var out = document.createElement("pre");
  out.id = "check";
  out.textContent = "images " + loaded.length + "/" + images.length +
    " tables " + document.getElementsByTagName("table").length;
  document.body.appendChild(out);
});
</script>"""


def figure(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    axis = plt.subplots(figsize=(2, 2))[1]
    axis.plot([0, 1], [1, 0])
    plt.savefig(path)
    plt.close("all")


def probe_like_run(root):
    """What a run of another command looks like: a results.json, a markdown table, figures
    (one nested), and training leftovers that the page must leave out."""
    root.mkdir()
    (root / "results.json").write_text(json.dumps({"probe": {"accuracy": 0.81, "layers": [1, 2]}}))
    (root / "probe.md").write_text("# probe\n\n| layer | accuracy |\n|---|---|\n| 1 | 0.81 |\n")
    figure(root / "accuracy.png")
    figure(root / "per_layer" / "layer1.png")
    figure(root / "learned" / "pretrain" / "checkpoints" / "checkpoint-2" / "skip.png")
    (root / "learned" / "pretrain" / "model").mkdir(parents=True)
    (root / "learned" / "pretrain" / "model" / "config.json").write_text("{}")
    return root


def test_report_renders_tables_figures_and_json_and_leaves_training_files_out(tmp_path):
    run = probe_like_run(tmp_path / "probe")
    contents = collect(run)
    assert [p.name for p in contents.figures] == ["accuracy.png", "layer1.png"]
    assert [p.name for p in contents.json] == ["results.json"]
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert '<img src="per_layer/layer1.png"' in page and "<td>1</td>" in page
    assert "<td>probe.accuracy</td><td>0.81</td>" in page
    text = (run / "report.md").read_text()
    assert "| 1 | 0.81 |" in text and "![per_layer/layer1.png](per_layer/layer1.png)" in text
    assert "| probe.layers | 1, 2 |" in text


def test_report_rejects_a_directory_without_results(tmp_path):
    with pytest.raises(PosAttnConfigError, match="run_dir="):
        main(["report", str(tmp_path)])


def browser_check(page):
    """(images loaded, images, tables) of `page` as headless Chromium renders it."""
    checked = page.with_name("report-check.html")
    checked.write_text(page.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    result = subprocess.run(
        [shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-dev-shm-usage", "--allow-file-access-from-files",
         "--virtual-time-budget=10000", "--dump-dom", checked.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    found = re.search(r'<pre id="check">images (\d+)/(\d+) tables (\d+)', result.stdout)
    assert found, result.stdout[-2000:] + result.stderr[-2000:]
    return tuple(int(g) for g in found.groups())


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="headless Chromium missing: `make test` installs Debian's chromium package "
    "(apt-get install chromium) when it can",
)
def test_every_image_of_the_report_loads_in_headless_chromium(tmp_path):
    _, model = saved_model(tmp_path, "tupe-r")
    inspected = tmp_path / "inspect"
    assert main(["inspect", str(model), "--output", str(inspected), "--text", TEXT,
                 "--length", "12"]) == 0  # fmt: skip
    probe = probe_like_run(tmp_path / "probe")
    for run, embed in ((inspected, True), (probe, False)):
        assert main(["report", str(run), *(["--embed"] if embed else [])]) == 0
        loaded, images, tables = browser_check(run / "report.html")
        assert loaded == images == len(collect(run).figures) > 0
        assert tables >= 2  # the run's markdown table(s) and the JSON summary
    # the check can fail: a figure removed after the page was written does not load
    (probe / "per_layer" / "layer1.png").unlink()
    assert browser_check(probe / "report.html")[:2] == (1, 2)

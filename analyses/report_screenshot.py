"""The docs' picture of a report's first screen: `tlm report` of committed results, then a headless
Chromium screenshot (the browser tests/test_report_layout.py drives) at 1400 x 900 px.

    .venv/bin/python -m analyses.report_screenshot            # writes figures/report_first_screen.png

Inputs, all committed under analyses/results/: the motivating comparison (5 seeds of uniform and the
wider-early/middle/late thirds) and the probes of SmolLM2-135M and all-MiniLM-L6-v2. Needs
/usr/bin/chromium (Debian's `chromium` package); refuses in one line without it."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ("analyses/results/motivating", "analyses/results/mechanism/SmolLM2-135M-Q4_1",
          "analyses/results/mechanism/all-MiniLM-L6-v2")
CHROMIUM = Path("/usr/bin/chromium")
SIZE = (1400, 900)


def screenshot(page: Path, png: Path) -> None:
    profile = tempfile.mkdtemp(prefix="tlm-chromium-")
    try:  # the same switches as the layout test: no network, no profile left behind
        cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync",
               f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={SIZE[0]},{SIZE[1]}",
               "--hide-scrollbars", page.resolve().as_uri()]
        subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if not png.is_file():
        raise SystemExit(f"error: chromium wrote no screenshot of {page}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "figures" / "report_first_screen.png")
    args = ap.parse_args(argv)
    if not CHROMIUM.exists():
        raise SystemExit("error: /usr/bin/chromium is absent (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="tlm-report-") as tmp:
        report = Path(tmp) / "report"
        inputs = [str(ROOT / i) for i in INPUTS]
        cmd = [sys.executable, str(ROOT / "cli.py"), "report", *inputs, "--out", str(report)]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        raw = Path(tmp) / "shot.png"
        screenshot(report / "report.html", raw)
        with Image.open(raw) as im:  # a 256-colour palette: the page is flat colours, under half the bytes
            small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
            small.save(args.out, optimize=True)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()

"""One colour per method everywhere; figures written as PDF, SVG and 300 dpi PNG."""

from __future__ import annotations

from pathlib import Path

from suite.figures import color, palette, save_figure


def test_a_method_has_one_colour_everywhere() -> None:
    assert color("qr") == palette(["full", "qr"])["qr"] == palette(["qr"])["qr"]
    assert color("some-new-method") == color("some-new-method")


def test_save_figure_writes_vector_and_300_dpi_png(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    files = save_figure(fig, tmp_path / "plot.png")
    plt.close(fig)
    assert [f.suffix for f in files] == [".png", ".pdf", ".svg"]
    assert all(f.stat().st_size > 0 for f in files)
    dpi = Image.open(files[0]).info["dpi"]
    assert round(dpi[0]) == 300


def test_the_same_figure_saved_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    import time

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(where: Path) -> dict[str, bytes]:
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, 1], [0, 1], marker="o")
        files = save_figure(fig, where / "plot.png")
        plt.close(fig)
        return {f.suffix: f.read_bytes() for f in files}

    first = draw(tmp_path / "a")
    time.sleep(1.1)  # a creation date would differ now
    assert draw(tmp_path / "b") == first

"""The helper package: lesson catalogue, progress/XP, memory meter, data, grading helpers."""

import json
import subprocess
import sys

import numpy as np
import pytest

from course import ROOT
from shared import lessons, memory, progress
from shared.grading import expect_error
from shared.checking import CheckFailure


@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(path))
    monkeypatch.delenv("MCT_GRADING", raising=False)
    return path


def test_catalogue_has_forty_lessons_worth_two_hundred_xp():
    assert len(lessons.LESSONS) == 40 and lessons.TOTAL_POINTS == 200
    assert [l.number for l in lessons.LESSONS] == list(range(1, 41))
    assert lessons.lesson("003").heading == "## 003 · Linear forward"
    assert lessons.lesson(40).function == "full_distributed_training_loop"
    assert lessons.lesson("lesson_003_linear_forward").function == "linear_forward"
    assert [len(lessons.lessons_of(p.number)) for p in lessons.PARTS] == [10, 4, 4, 6, 6, 5, 5]


def test_lesson_passed_records_xp_and_says_so(progress_file, capsys):
    progress.lesson_passed("003")
    progress.lesson_passed("003")  # passing twice counts once
    progress.lesson_passed(7)
    assert json.loads(progress_file.read_text()) == {"passed": ["003", "007"]}
    assert progress.xp() == 10
    assert "Part 1: 10/50 XP" in capsys.readouterr().out.splitlines()[-1]


def test_grading_never_writes_progress(progress_file, monkeypatch, capsys):
    monkeypatch.setenv("MCT_GRADING", "1")
    progress.lesson_passed("001")
    assert not progress_file.exists()


def test_damaged_progress_file_counts_as_no_progress(progress_file):
    progress_file.write_text("{not json")
    assert progress.passed_lessons() == set()
    progress.lesson_passed("002")
    assert progress.passed_lessons() == {"002"}


def test_panel_and_report_show_ticks_and_xp(progress_file):
    progress.lesson_passed("001")
    panel = progress.show_progress("01_mlp_core")
    assert "5/50 XP" in repr(panel) and "[x] 001" in repr(panel) and "[ ] 002" in repr(panel)
    assert "✅" in panel._repr_html_()
    report = progress.report()
    assert report.count("passed") == 1 and report.endswith("XP: 5/200  (1/40 lessons)")
    assert len([line for line in report.splitlines() if line.startswith("  0")]) == 40


def test_progress_command_prints_forty_lessons(progress_file):
    out = subprocess.run([sys.executable, "-m", "shared.progress"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "XP: 0/200" in out and "040" in out


def test_memory_meter_sees_numpy_allocations():
    measured = memory.measure_peak_memory(np.ones, 10**6)
    assert 8_000_000 <= measured.peak_bytes < 8_100_000
    assert measured.retained_bytes >= 8_000_000
    assert measured.result.shape == (10**6,)
    measured = memory.measure_peak_memory(lambda: float(np.ones(10**6).sum()))
    assert measured.peak_bytes >= 8_000_000 and measured.retained_bytes < 10_000


def test_format_bytes():
    assert memory.format_bytes(512) == "512 B"
    assert memory.format_bytes(3 * 2**20) == "3.0 MiB"


def test_expect_error_requires_the_right_exception():
    def accepts_anything(n):
        return n
    def rejects(n):
        raise ValueError("n must be positive")
    expect_error(rejects, [0], ["n"], ValueError, "n is 0")
    with pytest.raises(CheckFailure, match="should raise ValueError when n is 0"):
        expect_error(accepts_anything, [0], ["n"], ValueError, "n is 0")


def test_plot_helper_draws_a_log_loss_curve():
    import matplotlib
    matplotlib.use("Agg")
    from shared.plotting import plot_loss_curve
    ax = plot_loss_curve([3.0, 2.0, 1.0])
    assert ax.get_yscale() == "log" and len(ax.lines) == 1

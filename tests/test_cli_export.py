"""``cadence export``'s refusals: no ONNX exporter installed, not a run directory (the
exports of real runs are tested in tests/export/test_export_run.py)."""

from __future__ import annotations

import importlib.util

from cadence.cli import main


def test_onnx_without_the_export_extra_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec

    def without_onnxscript(name, *args, **kwargs):
        return None if name == "onnxscript" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_onnxscript)
    assert main(["export", str(tmp_path), "--format", "onnx"]) == 2
    error = capsys.readouterr().err
    assert "onnxscript" in error and "pip install 'cadence[export]'" in error
    assert not (tmp_path / "export").exists()


def test_a_directory_that_is_no_run_exits_2(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--format", "torchscript"]) == 2
    assert "config.yaml is missing" in capsys.readouterr().err


def test_the_format_is_required(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    assert "--format" in capsys.readouterr().err

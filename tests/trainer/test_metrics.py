from cadence.trainer.metrics import MetricsWriter, read_metrics


def test_writes_jsonl_and_truncates_on_resume(tmp_path):
    writer = MetricsWriter(tmp_path)
    for i in range(1, 6):
        writer.write(
            {"iteration": i, "env_steps": 10 * i, "wall_time": 0.1, "train_time": 0.1},
            {"loss/x": float(i)},
        )
    writer.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 6, "env_ste')  # torn line from a kill -9
    assert [r["loss/x"] for r in read_metrics(tmp_path)[:5]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    writer = MetricsWriter(tmp_path, resume_iteration=3, resume_env_steps=30)
    writer.write(
        {"iteration": 4, "env_steps": 40, "wall_time": 0.1, "train_time": 0.1}, {"loss/x": 40.0}
    )
    writer.close()
    records = read_metrics(tmp_path)
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    assert records[-1]["loss/x"] == 40.0
    assert any((tmp_path / "tb").iterdir())


def test_non_finite_values_become_null(tmp_path):
    writer = MetricsWriter(tmp_path)
    writer.write(
        {"iteration": 1, "env_steps": 1, "wall_time": 0, "train_time": 0}, {"loss/x": float("nan")}
    )
    writer.close()
    assert read_metrics(tmp_path)[0]["loss/x"] is None

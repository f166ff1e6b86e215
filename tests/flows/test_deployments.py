"""Deployments: the nightly pipeline carries its cron schedule; the rerun deployment takes a stage and a run id.

Applied against a real (temporary) Prefect API from `prefect_test_harness`, then read back.
"""

from __future__ import annotations

import pytest


@pytest.mark.integration
def test_deployments_apply_with_schedule(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAVINCI_HOME", str(tmp_path))
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from flows.deployments import build_deployments

    with prefect_test_harness(server_startup_timeout=180):
        nightly, rerun = build_deployments("tiny", "0 3 * * *")
        ids = [nightly.apply(), rerun.apply()]
        with get_client(sync_client=True) as client:
            got_nightly = client.read_deployment(ids[0])
            got_rerun = client.read_deployment(ids[1])
    assert got_nightly.name == "nightly" and got_nightly.parameters["profile"] == "tiny"
    assert [s.schedule.cron for s in got_nightly.schedules] == ["0 3 * * *"]
    assert got_rerun.name == "rerun-stage" and not got_rerun.schedules
    assert {"stage", "from_run_id"} <= set(got_rerun.parameter_openapi_schema["properties"])


def test_serve_prints_commands_that_name_its_api() -> None:
    from flows.deployments import check_cron, second_shell_commands

    lines = second_shell_commands("http://127.0.0.1:4321/api")
    assert all(line.startswith("PREFECT_API_URL=http://127.0.0.1:4321/api prefect deployment run ") for line in lines)
    assert any("'rerun-stage/rerun-stage' -p stage=eval -p from_run_id=" in line for line in lines)
    check_cron("0 3 * * *")
    from davinci.errors import ConfigError

    with pytest.raises(ConfigError, match="not a valid cron expression"):
        check_cron("61 * * * *")

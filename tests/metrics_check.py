"""Checks the coordinator's Prometheus exposition after a finished job, with
the official parser (Debian's python3-prometheus-client): the text parses,
every counter ends in _total, every histogram (all are durations) is in
seconds, and the job's step counter, job and worker gauges, failure and
recovery series (no restarts or losses, two checkpoint writes, a heartbeat
age per worker) and build info read what the run did.

Usage: metrics_check.py METRICS_URL JOB_ID STEPS WORKERS
"""
import re
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    url, job_id, steps, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200, response.status
        text = response.read().decode("utf-8")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {}
    for family in families.values():
        if family.type == "counter":
            for s in family.samples:
                assert s.name.endswith("_total") or s.name.endswith("_created"), s.name
        if family.type in ("histogram", "summary"):
            assert family.name.endswith("_seconds"), family.name
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def value(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        assert key in samples, "missing %s%s in:\n%s" % (name, labels, text)
        return samples[key]

    assert value("tessera_job_steps_total", job=job_id) == steps
    assert value("tessera_job_tokens_total", job=job_id) > 0
    assert value("tessera_job_repeated_steps_total", job=job_id) == 0
    assert value("tessera_jobs", state="SUCCEEDED") >= 1
    assert value("tessera_jobs", state="RUNNING") == 0
    assert value("tessera_workers", health="healthy") == workers
    assert value("tessera_workers", health="unhealthy") == 0
    assert value("tessera_step_duration_seconds_count") >= steps
    assert value("tessera_step_duration_seconds_sum") > 0
    assert value("tessera_step_control_overhead_seconds_count") >= steps
    # Failure and recovery: nothing failed, two checkpoints were committed.
    assert value("tessera_job_restarts_total", job=job_id) == 0
    assert value("tessera_worker_losses_total") == 0
    assert value("tessera_recovery_seconds_count") == 0
    assert value("tessera_preemption_seconds_count") == 0
    assert value("tessera_preemption_steps_redone_total") == 0
    assert value("tessera_checkpoint_write_seconds_count") == 2
    assert value("tessera_checkpoint_write_seconds_sum") > 0
    ages = [s for s in families["tessera_worker_heartbeat_age_seconds"].samples]
    assert len(ages) == workers and all(0 <= s.value < 30 for s in ages), ages
    build = [s for s in families["tessera_build_info"].samples]
    assert len(build) == 1 and build[0].value == 1 and "version" in build[0].labels, build
    assert re.fullmatch(r"[0-9a-f]{40,64}|unknown", build[0].labels.get("commit", "")), build
    print("metrics: %d families parse; %s ran %d steps" % (len(families), job_id, steps))


if __name__ == "__main__":
    main()

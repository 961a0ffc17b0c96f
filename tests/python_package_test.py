"""Integration test of the installed tessera_client package (see
python_package_test.sh, which installs it and makes the certificates).

Starts a TLS coordinator that checks user tokens (alice and bob, both plain
users) with a state directory, and two mTLS CPU workers, all on loopback,
then drives them as alice through tessera_client.Client: every scenario of
the package's contract, each on jobs of its own, waiting on events rather
than on time. The coordinator is killed and restarted on the same address
and state directory in the middle of a watched job.

Usage: python_package_test.py --root RUNFILES_ROOT --dir SCRATCH [unittest args]
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

import tessera_client
from tessera_client import job_pb2

ALICE_TOKEN = "alice-0123456789abcdef0123456789"
BOB_TOKEN = "bob-0123456789abcdef0123456789ab"

ARGS = None
STACK = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_job(name, steps, **overrides):
    """Small enough for 2 cores: a few milliseconds a step."""
    spec = {
        "name": name,
        "model": {"vocab_size": 256, "d_model": 32, "n_layers": 1, "n_heads": 2,
                  "ffn_dim": 64, "seq_len": 16},
        "data": {"synthetic": {"task": "COPY"}, "micro_batch_size": 2},
        "optimizer": {"lr": 3e-3, "warmup_steps": 1},
        "world_size": 2, "device_kind": "CPU", "steps": steps, "seed": 11,
    }
    spec.update(overrides)
    return spec


class Stack:
    """The coordinator and two workers, with their logs in the scratch dir."""

    def __init__(self, root, scratch):
        self.root, self.dir = root, scratch
        self.address = "127.0.0.1:%d" % free_port()
        certs = os.path.join(scratch, "certs")
        self.ca = os.path.join(certs, "ca.pem")
        self.tls = ["--tls_cert=%s/node.pem" % certs, "--tls_key=%s/node.key" % certs,
                    "--tls_ca=%s" % self.ca, "--worker_token_file=%s/worker.token" % certs]
        users = os.path.join(scratch, "users.tokens")
        with open(users, "w") as f:
            f.write("# name role token\nalice user %s\nbob user %s\n" % (ALICE_TOKEN, BOB_TOKEN))
        self.token_files = {}
        for user, token in (("alice", ALICE_TOKEN), ("bob", BOB_TOKEN)):
            path = os.path.join(scratch, user + ".token")
            with open(path, "w") as f:
                f.write(token + "\n")
            os.chmod(path, 0o600)
            self.token_files[user] = path
        self.coordinator_flags = [
            "--listen=" + self.address, "--state_dir=" + os.path.join(scratch, "state"),
            "--user_tokens_file=" + users, "--worker_timeout_ms=2000",
            "--heartbeat_interval_ms=200"] + self.tls
        self.coordinator = None
        self.workers = []
        self.logs = []

    def _start(self, binary, flags, log_name, ready_line):
        log = os.path.join(self.dir, log_name)
        self.logs.append(log)
        with open(log, "wb") as out:
            process = subprocess.Popen([os.path.join(self.root, binary)] + flags,
                                       stdout=out, stderr=subprocess.STDOUT)
        give_up = time.monotonic() + 60
        while time.monotonic() < give_up:
            with open(log, "rb") as f:
                if ready_line.encode() in f.read():
                    return process
            if process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("%s never said %r:\n%s" % (binary, ready_line, self.tail()))

    def start(self):
        self.start_coordinator("coordinator.log")
        for i in range(2):
            self.workers.append(self._start(
                "worker/tessera-worker",
                ["--coordinator=" + self.address, "--device=cpu"] + self.tls,
                "worker-%d.log" % i, "serving on"))

    def start_coordinator(self, log_name):
        self.coordinator = self._start("server/tessera-coordinator", self.coordinator_flags,
                                       log_name, "listening on")

    def kill_and_restart_coordinator(self):
        self.coordinator.send_signal(signal.SIGKILL)
        self.coordinator.wait()
        self.start_coordinator("coordinator-restarted.log")

    def stop(self):
        for process in self.workers + [self.coordinator]:
            if process and process.poll() is None:
                process.kill()
                process.wait()

    def tail(self):
        parts = []
        for log in self.logs:
            with open(log, errors="replace") as f:
                parts.append("--- %s ---\n%s" % (os.path.basename(log),
                                                  "".join(f.readlines()[-25:])))
        return "\n".join(parts)

    def client(self, user="alice", **options):
        return tessera_client.Client(self.address, tls_ca=self.ca,
                                     token_file=self.token_files[user], **options)


def setUpModule():
    global STACK
    STACK = Stack(ARGS.root, ARGS.dir)
    STACK.start()


def tearDownModule():
    if STACK:
        STACK.stop()


class PythonPackageTest(unittest.TestCase):
    def setUp(self):
        self.alice = STACK.client("alice")
        self.addCleanup(self.alice.close)

    def run_until(self, events, predicate):
        """Reads `events` until one satisfies predicate; returns it."""
        for event in events:
            if predicate(event):
                return event
        self.fail("the stream ended before the awaited event\n" + STACK.tail())

    def end(self, job_id):
        """Cancels a job if it has not ended, and waits until it has."""
        try:
            self.alice.cancel(job_id, reason="test done")
        except tessera_client.FailedPrecondition:
            pass
        try:
            return self.alice.wait(job_id, timeout=120)
        except tessera_client.JobFailed as failed:
            return failed.job

    def test_submit_watch_logs_and_step_records(self):
        placement = self.alice.submit(tiny_job("dry", 6), dry_run=True)
        self.assertIn(placement.outcome, (placement.START_NOW, placement.WAIT), placement)
        job = self.alice.submit(tiny_job("watched", 6))
        self.assertEqual(job.owner, "alice")
        steps, states = [], []
        for event in self.alice.watch(job.id):
            if isinstance(event, tessera_client.StepReported):
                steps.append(event.record.step)
            elif isinstance(event, tessera_client.StateChanged):
                states.append(event.state)
        self.assertEqual(steps, list(range(6)), STACK.tail())
        self.assertEqual(states[-1], "SUCCEEDED", states)
        self.assertEqual(self.alice.wait(job.id, timeout=30).steps_done, 6)

        records = self.alice.job_metrics(job.id)
        self.assertEqual([r.step for r in records], list(range(6)))
        self.assertTrue(all(r.step_time_s > 0 and r.tokens > 0 and r.forward_s > 0
                            for r in records), records)
        try:
            import pandas  # noqa: F401
            frame = self.alice.job_metrics(job.id, as_frame=True)
            self.assertEqual(list(frame["step"]), list(range(6)))
        except ImportError:
            pass

        lines = list(self.alice.logs(job.id))
        self.assertTrue(lines, "no log lines")
        self.assertTrue(all(line.job_id == job.id for line in lines))
        self.assertEqual({line.rank for line in self.alice.logs(job.id, ranks=[1])}, {1})
        self.assertEqual(len(self.alice.workers()), 2)

    def test_cancel_delete_and_wait(self):
        job = self.alice.submit(tiny_job("cancelled", 100000))
        watch = self.alice.watch(job.id)
        self.run_until(watch, lambda e: isinstance(e, tessera_client.StepReported))
        watch.close()
        # A followed log stream gives lines of the running job.
        follow = self.alice.logs(job.id, follow=True)
        self.assertEqual(next(follow).job_id, job.id)
        follow.close()
        with self.assertRaises(tessera_client.WaitTimeout):
            self.alice.wait(job.id, timeout=0.5)
        with self.assertRaises(tessera_client.FailedPrecondition):
            self.alice.delete(job.id)  # still running
        cancelled = self.alice.cancel(job.id, reason="enough")
        self.assertEqual(cancelled.id, job.id)
        with self.assertRaises(tessera_client.JobFailed) as caught:
            self.alice.wait(job.id, timeout=60)
        self.assertEqual(caught.exception.state, "CANCELLED")
        self.assertIn("enough", caught.exception.reason)
        with self.assertRaises(tessera_client.FailedPrecondition):
            self.alice.cancel(job.id)
        self.alice.delete(job.id)
        with self.assertRaises(tessera_client.NotFound):
            self.alice.get(job.id)

    def test_wait_raises_job_failed_with_the_reason(self):
        not_a_dir = os.path.join(ARGS.dir, "notes.txt")
        with open(not_a_dir, "w") as f:
            f.write("a file, not a directory")
        spec = tiny_job("fails", 100, checkpoint={"dir": not_a_dir + "/job",
                                                  "interval_steps": 10})
        job = self.alice.submit(spec)
        with self.assertRaises(tessera_client.JobFailed) as caught:
            self.alice.wait(job.id, timeout=120)
        failed = caught.exception
        self.assertEqual(failed.state, "FAILED")
        self.assertIn("checkpoint.dir", failed.reason)
        self.assertEqual(failed.job.id, job.id)

    def test_list_follows_pages(self):
        ids = [self.alice.submit(tiny_job("page-%d" % i, 100000)).id for i in range(3)]
        try:
            paged = self.alice.list(page_size=2)
            self.assertGreater(len(paged), 2)
            self.assertEqual([j.id for j in paged], [j.id for j in self.alice.list()])
            listed = [j.id for j in paged if j.id in ids]
            self.assertEqual(listed, list(reversed(ids)))  # newest first
            mine = self.alice.list(states=["PENDING", "RUNNING", "STARTING"], page_size=1,
                                   only_mine=True)
            self.assertTrue(set(ids) <= {j.id for j in mine}, mine)
        finally:
            for job_id in ids:
                self.end(job_id)

    def test_every_exception_comes_from_a_real_answer(self):
        with self.assertRaises(tessera_client.InvalidJobSpec) as caught:
            self.alice.submit(tiny_job("bad", 6, world_size=0))
        self.assertEqual(caught.exception.field, "world_size")
        self.assertIn("world_size", caught.exception.details)
        with self.assertRaises(tessera_client.InvalidJobSpec) as caught:
            self.alice.submit(tiny_job("bad", 6, world_size=0), dry_run=True)
        with self.assertRaises(tessera_client.InvalidRequest):
            self.alice.get("x" * 200)  # job_id is at most 128 bytes
        with self.assertRaises(tessera_client.NotFound):
            self.alice.get("no-such-job")
        with self.assertRaises(tessera_client.NotFound):
            list(self.alice.watch("no-such-job"))
        with self.assertRaises(tessera_client.NotFound):
            list(self.alice.logs("no-such-job"))

        with tessera_client.Client(STACK.address, tls_ca=STACK.ca) as anonymous:
            with self.assertRaises(tessera_client.Unauthenticated):
                anonymous.list()

        with tessera_client.Client("127.0.0.1:%d" % free_port(), tls_ca=STACK.ca,
                                   token_file=STACK.token_files["alice"],
                                   connect_timeout_s=1) as nowhere:
            started = time.monotonic()
            with self.assertRaises(tessera_client.CoordinatorUnavailable) as caught:
                nowhere.submit(tiny_job("nowhere", 6))
            self.assertGreater(caught.exception.retry_after_s, 0)
            self.assertIn("no connection within 1 s", caught.exception.details)
            self.assertLess(time.monotonic() - started, 8)  # connect_timeout_s, not the call's
            with self.assertRaises(tessera_client.CoordinatorUnavailable):
                list(nowhere.watch("any"))

        job = self.alice.submit(tiny_job("alices", 100000))
        try:
            with STACK.client("bob") as bob:
                self.assertEqual(bob.get(job.id).owner, "alice")  # anyone may read
                with self.assertRaises(tessera_client.PermissionDenied):
                    bob.cancel(job.id)
                with self.assertRaises(tessera_client.PermissionDenied):
                    bob.suspend(job.id)
        finally:
            self.end(job.id)

    def test_checkpoint_suspend_and_resume(self):
        spec = tiny_job("suspended", 100000, checkpoint={
            "dir": os.path.join(ARGS.dir, "ckpt-suspend"), "interval_steps": 100000})
        job = self.alice.submit(spec)
        try:
            events = self.alice.watch(job.id)
            self.run_until(events, lambda e: isinstance(e, tessera_client.StepReported))
            with self.assertRaises(tessera_client.FailedPrecondition):
                self.alice.resume(job.id)  # not suspended
            self.alice.checkpoint(job.id)
            committed = self.run_until(events, lambda e: isinstance(e, tessera_client.OtherEvent)
                                       and e.kind == "checkpoint")
            self.assertGreater(committed.message.step, 0)
            # A running job's records so far: each step once, from 0.
            so_far = [r.step for r in self.alice.job_metrics(job.id)]
            self.assertEqual(so_far, list(range(len(so_far))))
            self.assertGreaterEqual(len(so_far), committed.message.step)
            self.alice.suspend(job.id, reason="make room")
            self.run_until(events, lambda e: isinstance(e, tessera_client.StateChanged)
                           and e.state == "SUSPENDED")
            self.assertEqual(self.alice.resume(job.id).state, job_pb2.PENDING)
            self.run_until(events, lambda e: isinstance(e, tessera_client.StateChanged)
                           and e.state == "RUNNING")
            events.close()
        finally:
            self.end(job.id)

    def test_the_examples_run(self):
        job_file = os.path.join(ARGS.dir, "tiny_job.json")
        with open(job_file, "w") as f:
            json.dump(tiny_job("example", 4), f)
        examples = os.path.join(ARGS.root, "client", "python", "examples")
        credentials = ["--coordinator", STACK.address, "--tls_ca", STACK.ca,
                       "--token_file", STACK.token_files["alice"]]

        def run(script, *args):
            result = subprocess.run([sys.executable, os.path.join(examples, script)] +
                                    list(args) + credentials, capture_output=True, text=True,
                                    timeout=300, cwd=ARGS.dir)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            return result.stdout

        sweep = run("lr_sweep.py", job_file, "--lr", "0.001", "0.003", "0.01", "--steps", "3")
        self.assertEqual(sweep.count("SUCCEEDED"), 3, sweep)
        self.assertIn("lowest loss over the last tenth of the steps: lr", sweep)
        watched = run("watch_loss.py", job_file, "--png", os.path.join(ARGS.dir, "loss.png"))
        self.assertEqual(watched.count("step "), 4, watched)
        self.assertIn("-> SUCCEEDED", watched)

    def test_watch_resumes_across_a_coordinator_restart(self):
        steps = 80
        spec = tiny_job("restarted", steps, checkpoint={
            "dir": os.path.join(ARGS.dir, "ckpt-restart"), "interval_steps": 5})
        spec["model"].update({"d_model": 64, "n_layers": 2, "ffn_dim": 128, "seq_len": 32})
        job = self.alice.submit(spec)
        sequences, seen_steps, states = [], [], []
        restarted = False
        events_before_restart = 0
        for event in self.alice.watch(job.id):
            sequences.append(event.sequence)
            if isinstance(event, tessera_client.StateChanged):
                states.append(event.state)
            if isinstance(event, tessera_client.StepReported):
                seen_steps.append(event.record.step)
                # Checkpoints every 5 steps: 20 has one committed behind it.
                if event.record.step >= 20 and not restarted:
                    STACK.kill_and_restart_coordinator()
                    restarted = True
                    events_before_restart = len(sequences)
        self.assertTrue(restarted)
        # Every event once, none missing: sequences run 1, 2, 3, ...
        self.assertEqual(sequences, list(range(1, len(sequences) + 1)))
        self.assertEqual(states[-1], "SUCCEEDED", STACK.tail())
        # The restarted coordinator ran the job again from its checkpoint,
        # and the stream carried on with what it recorded.
        self.assertGreaterEqual(states.count("RUNNING"), 2, states)
        self.assertGreater(len(sequences), events_before_restart + 1)
        self.assertEqual(set(seen_steps), set(range(steps)))
        records = self.alice.job_metrics(job.id)
        self.assertEqual([r.step for r in records], list(range(steps)))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--dir", required=True)
    ARGS, rest = parser.parse_known_args()
    # The pip-installed copy, with its generated stubs, not the sources.
    assert os.path.realpath(tessera_client.__file__).startswith(
        os.path.realpath(ARGS.dir)), tessera_client.__file__
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()

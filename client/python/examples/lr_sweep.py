"""A learning-rate sweep: three jobs submitted together, compared when all
have ended.

Each job is the job file's spec with another optimizer.lr (and a name that
says which). The coordinator queues what does not fit on the free workers,
so the three run side by side or one after another. When all have ended,
the table compares each job's final training loss, its mean over the last
tenth of the steps, and its last validation loss where the spec has
validation data.

    python3 lr_sweep.py client/examples/default_job.yaml --lr 1e-3 3e-3 1e-2
    python3 lr_sweep.py JOB_FILE --coordinator HOST:PORT --tls_ca ca.pem \
        --token_file me.token --steps 100

The token comes from --token_file, $TESSERA_TOKEN_FILE or $TESSERA_TOKEN,
as for the CLI.
"""
import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

import tessera_client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job_file")
    parser.add_argument("--lr", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2])
    parser.add_argument("--steps", type=int, help="override the job file's steps")
    parser.add_argument("--coordinator")
    parser.add_argument("--tls_ca")
    parser.add_argument("--token_file")
    args = parser.parse_args()

    base = tessera_client.load_job_spec(args.job_file)
    if args.steps:
        base.steps = args.steps
    with tessera_client.Client(args.coordinator, tls_ca=args.tls_ca,
                               token_file=args.token_file) as tessera:
        jobs = {}
        for lr in args.lr:
            spec = tessera_client.load_job_spec(base)
            spec.optimizer.lr = lr
            spec.name = "%s-lr%g" % (base.name or "sweep", lr)
            jobs[lr] = tessera.submit(spec)
            print("submitted %s: lr %g" % (jobs[lr].id, lr), flush=True)

        def outcome(lr):
            try:
                return tessera.wait(jobs[lr].id), None
            except tessera_client.JobFailed as failed:
                return failed.job, failed.reason

        with ThreadPoolExecutor(len(jobs)) as pool:
            ended = dict(zip(jobs, pool.map(outcome, jobs)))

        print("\n%-10s %-12s %-10s %10s %14s %10s" % ("lr", "job", "state", "final loss",
                                                     "last 10% mean", "val loss"))
        best = None
        for lr, (job, why) in sorted(ended.items()):
            records = tessera.job_metrics(job.id)
            if why is not None or not records:
                print("%-10g %-12s %-10s %s" % (lr, job.id, tessera_client.job_pb2.JobState.Name(
                    job.state), why or "no steps"))
                continue
            tail = records[-max(1, len(records) // 10):]
            tail_mean = sum(r.loss for r in tail) / len(tail)
            validated = [r.validation_loss for r in records if r.validation_loss is not None]
            print("%-10g %-12s %-10s %10.4f %14.4f %10s" % (
                lr, job.id, "SUCCEEDED", records[-1].loss, tail_mean,
                "%.4f" % validated[-1] if validated else "-"))
            if best is None or tail_mean < best[1]:
                best = (lr, tail_mean)
        if best is None:
            print("no job succeeded")
            return 1
        print("\nlowest loss over the last tenth of the steps: lr %g" % best[0])
        return 0


if __name__ == "__main__":
    sys.exit(main())

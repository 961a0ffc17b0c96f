"""A job watched from a notebook-style script: its loss printed as each step
is reported, then plotted.

Submits the job file (or follows a job already running, with --job), prints
every step's loss as the coordinator reports it, and when the job ends
reads its step records, counted once across restarts, and plots the
training loss, and the validation loss where there is one, with matplotlib
if it is installed (Debian: python3-matplotlib), into a PNG. Without
matplotlib it prints the records' summary instead. In a notebook, run the
cells of main() one by one; `records_to_frame` gives a pandas DataFrame.

    python3 watch_loss.py client/examples/default_job.yaml --png loss.png
    python3 watch_loss.py --job j-12 --coordinator HOST:PORT --tls_ca ca.pem
"""
import argparse
import sys

import tessera_client


def plot(records, path: str, title: str) -> bool:
    """Writes the loss curve to `path`; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot([r.step for r in records], [r.loss for r in records], label="training loss")
    validated = [r for r in records if r.validation_loss is not None]
    if validated:
        axes.plot([r.step for r in validated], [r.validation_loss for r in validated], "o-",
                  label="validation loss")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job_file", nargs="?")
    parser.add_argument("--job", help="watch this job instead of submitting one")
    parser.add_argument("--png", default="loss.png")
    parser.add_argument("--coordinator")
    parser.add_argument("--tls_ca")
    parser.add_argument("--token_file")
    args = parser.parse_args()
    if bool(args.job_file) == bool(args.job):
        parser.error("give a job file or --job, not both")

    tessera = tessera_client.Client(args.coordinator, tls_ca=args.tls_ca,
                                    token_file=args.token_file)

    # Cell 1: submit, or attach to a running job.
    job_id = args.job or tessera.submit(args.job_file).id
    print("watching", job_id)

    # Cell 2: the live loss. A restarted attempt reports steps again; the
    # events say which attempt each record is from.
    final = None
    for event in tessera.watch(job_id):
        if isinstance(event, tessera_client.StepReported):
            r = event.record
            val = "" if r.validation_loss is None else "  val %.4f" % r.validation_loss
            print("step %5d  loss %.4f  %.3f s%s" % (r.step, r.loss, r.step_time_s, val),
                  flush=True)
        elif isinstance(event, tessera_client.StateChanged):
            print("-> %s %s" % (event.state, event.reason), flush=True)
            final = event.state

    # Cell 3: the records, once per step, and the plot.
    records = tessera.job_metrics(job_id)
    if records and plot(records, args.png, "%s (%s)" % (job_id, final)):
        print("plotted %d steps into %s" % (len(records), args.png))
    elif records:
        print("matplotlib is not installed: %d steps, loss %.4f -> %.4f"
              % (len(records), records[0].loss, records[-1].loss))
    tessera.close()
    return 0 if final == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())

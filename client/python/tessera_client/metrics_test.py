"""StepHistory keeps one record per step: the highest attempt's, and of
equal attempts the later one; records carry phases and validation."""
import unittest

from tessera_client.metrics import COLUMNS, StepRecord, counted_once, records_to_frame
from tessera_client.v1 import job_pb2


def record(step, attempt, loss, validation=None):
    m = job_pb2.StepMetrics(step=step, attempt=attempt, loss=loss)
    m.phases.forward_s = 0.25
    m.phases.collective_waits.final_reduce_s = 0.003
    m.phases.collective_waits.first_gather_s = 0.001
    if validation is not None:
        m.validation.loss = validation
        m.validation.tokens = 64
    return StepRecord.from_proto(m, time_unix_ms=1000 + step)


class StepHistoryTest(unittest.TestCase):
    def test_a_restarted_attempt_replaces_the_steps_it_ran_again(self):
        events = [record(0, 0, 5.0), record(1, 0, 4.0), record(2, 0, 3.0),
                  record(1, 1, 4.5), record(2, 1, 3.5), record(3, 1, 2.5)]
        kept = counted_once(events)
        self.assertEqual([r.step for r in kept], [0, 1, 2, 3])
        self.assertEqual([r.attempt for r in kept], [0, 1, 1, 1])
        self.assertEqual([r.loss for r in kept], [5.0, 4.5, 3.5, 2.5])

    def test_an_older_attempt_arriving_late_is_dropped(self):
        kept = counted_once([record(4, 2, 1.0), record(4, 1, 9.0)])
        self.assertEqual([(r.attempt, r.loss) for r in kept], [(2, 1.0)])

    def test_of_equal_attempts_the_later_record_counts(self):
        # A job resumed after a coordinator restart keeps its attempt number.
        kept = counted_once([record(7, 0, 2.0), record(7, 0, 1.5)])
        self.assertEqual([r.loss for r in kept], [1.5])

    def test_phases_and_validation_are_columns(self):
        plain, validated = record(0, 0, 2.0), record(1, 0, 1.0, validation=1.25)
        self.assertEqual(plain.forward_s, 0.25)
        self.assertIsNone(plain.validation_loss)
        self.assertEqual((validated.validation_loss, validated.validation_tokens), (1.25, 64))
        self.assertIn("mfu", COLUMNS)
        # Each site of the collectives' wait is a column of its own.
        self.assertEqual((plain.wait_final_reduce_s, plain.wait_first_gather_s,
                          plain.wait_all_reduce_s), (0.003, 0.001, 0.0))
        waits = [c for c in COLUMNS if c.startswith("wait_")]
        self.assertEqual(len(waits), len(job_pb2.CollectiveWaits.DESCRIPTOR.fields))

    def test_a_data_frame_where_pandas_is_installed(self):
        records = [record(0, 0, 2.0), record(1, 0, 1.0)]
        try:
            import pandas  # noqa: F401
        except ImportError:
            with self.assertRaisesRegex(ImportError, "python3-pandas"):
                records_to_frame(records)
            return
        frame = records_to_frame(records)
        self.assertEqual(list(frame["loss"]), [2.0, 1.0])
        self.assertEqual(list(frame.columns), COLUMNS)


if __name__ == "__main__":
    unittest.main()

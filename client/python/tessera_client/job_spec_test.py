"""Job specs from dicts, YAML and JSON files and messages; unknown fields
and unreadable files are InvalidJobSpec naming the field or file."""
import os
import tempfile
import unittest

from tessera_client.errors import InvalidJobSpec
from tessera_client.job_spec import job_spec_to_dict, load_job_spec
from tessera_client.v1 import job_pb2

EXAMPLES = os.path.join(os.environ.get("TESSERA_REPO_ROOT", "../.."), "client", "examples")


class JobSpecTest(unittest.TestCase):
    def test_the_cli_example_files_load_the_same_from_yaml_and_json(self):
        from_yaml = load_job_spec(os.path.join(EXAMPLES, "default_job.yaml"))
        from_json = load_job_spec(os.path.join(EXAMPLES, "default_job.json"))
        self.assertEqual(from_yaml.device_kind, job_pb2.CPU)
        self.assertEqual(from_yaml.data.synthetic.task, job_pb2.SyntheticData.ADDITION)
        self.assertEqual(from_yaml, from_json)

    def test_a_dict_round_trips_and_a_message_is_copied(self):
        spec = load_job_spec({"name": "x", "steps": 3, "device_kind": "CPU"})
        self.assertEqual(load_job_spec(job_spec_to_dict(spec)), spec)
        copy = load_job_spec(spec)
        copy.steps = 4
        self.assertEqual(spec.steps, 3)

    def test_an_unknown_field_is_refused_with_its_path(self):
        with self.assertRaises(InvalidJobSpec) as caught:
            load_job_spec({"model": {"d_modle": 64}})
        self.assertEqual(caught.exception.field, "model.d_modle")

    def test_a_bad_enum_name_is_refused(self):
        with self.assertRaises(InvalidJobSpec):
            load_job_spec({"device_kind": "TPU"})

    def test_files_that_are_missing_or_not_a_mapping(self):
        with self.assertRaisesRegex(InvalidJobSpec, "cannot read"):
            load_job_spec("/nonexistent/job.yaml")
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("- a list\n")
            f.flush()
            with self.assertRaisesRegex(InvalidJobSpec, "mapping"):
                load_job_spec(f.name)

    def test_other_types_are_a_type_error(self):
        with self.assertRaises(TypeError):
            load_job_spec(42)


if __name__ == "__main__":
    unittest.main()

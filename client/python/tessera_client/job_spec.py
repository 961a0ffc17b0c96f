"""Job specs from what a Python caller has: a dict, a YAML or JSON job file,
or a JobSpec message.

Field names are exactly JobSpec's (proto/tessera/v1/job.proto), enums by
name, as in the CLI's job files (client/job_file.h): a dict is read by
protobuf's JSON rules, and YAML is loaded into a dict first. Unknown
fields are refused, never ignored: a typo must not silently change a
training job. What the coordinator alone can check (ranges, file
contents) it checks at submit time.
"""
import json
import os
import re
from typing import Any, Mapping, Union

from google.protobuf import json_format

from tessera_client.errors import InvalidJobSpec
from tessera_client.v1 import job_pb2

SpecLike = Union[job_pb2.JobSpec, Mapping[str, Any], str, "os.PathLike[str]"]

MAX_JOB_FILE_BYTES = 1 << 20  # as client/job_file.h

_UNKNOWN_FIELD = re.compile(r'no field named "([^"]+)" at "JobSpec\.?([^"]*)"')


def load_job_spec(spec: SpecLike) -> job_pb2.JobSpec:
    """A JobSpec from a message (copied), a mapping, or a .yaml/.yml/.json
    path. InvalidJobSpec names the field a local parse refused."""
    if isinstance(spec, job_pb2.JobSpec):
        copy = job_pb2.JobSpec()
        copy.CopyFrom(spec)
        return copy
    if isinstance(spec, Mapping):
        return _from_mapping(spec, "spec")
    if isinstance(spec, (str, os.PathLike)):
        return _from_mapping(_read_job_file(os.fspath(spec)), os.fspath(spec))
    raise TypeError("a job spec is a JobSpec, a dict or a job file path, not %s"
                    % type(spec).__name__)


def _read_job_file(path: str) -> Mapping[str, Any]:
    try:
        size = os.path.getsize(path)
        if size > MAX_JOB_FILE_BYTES:
            raise InvalidJobSpec("%s: larger than %d bytes" % (path, MAX_JOB_FILE_BYTES))
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise InvalidJobSpec("%s: cannot read: %s" % (path, err.strerror)) from None
    try:
        if path.endswith(".json") or text.lstrip().startswith("{"):
            document = json.loads(text)
        else:
            import yaml  # Debian: python3-yaml
            document = yaml.safe_load(text)
    except ValueError as err:  # json.JSONDecodeError
        raise InvalidJobSpec("%s: %s" % (path, err)) from None
    except Exception as err:  # yaml.YAMLError
        raise InvalidJobSpec("%s: %s" % (path, err)) from None
    if not isinstance(document, Mapping):
        raise InvalidJobSpec("%s: a job file is a mapping of JobSpec fields" % path)
    return document


def _from_mapping(document: Mapping[str, Any], source: str) -> job_pb2.JobSpec:
    spec = job_pb2.JobSpec()
    try:
        json_format.ParseDict(dict(document), spec)
    except json_format.ParseError as err:
        message = str(err).split("\n")[0]
        field = None
        match = _UNKNOWN_FIELD.search(message)
        if match:
            field = ".".join(part for part in (match.group(2), match.group(1)) if part)
            message = "%s: unknown field" % field
        raise InvalidJobSpec("%s: %s" % (source, message), field) from None
    return spec


def job_spec_to_dict(spec: job_pb2.JobSpec) -> dict:
    """The spec as a job file's mapping (proto field names, enum names)."""
    return json_format.MessageToDict(spec, preserving_proto_field_name=True)

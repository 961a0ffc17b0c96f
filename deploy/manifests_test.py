"""Checks the deployment files in deploy/systemd and deploy/k8s.

They are not run in CI (there is no cluster), so this reads them as the
tools would and holds them to what Tessera's binaries accept:

- every Kubernetes document is well-formed YAML with apiVersion, kind and
  metadata.name, in the tessera namespace;
- the coordinator Deployment has one replica, a Recreate strategy, exec
  readiness and liveness probes that run `tessera health`, and a Service
  whose selector picks its pods and whose target ports exist;
- the worker DaemonSet requests nvidia.com/gpu and uses the host network;
- every Secret a pod mounts exists in secrets.yaml, with every key read;
- every path a container reads lies under a volume it mounts;
- the systemd units have the sections, restart policies and ExecStart
  binaries expected, and their EnvironmentFile exists in deploy/systemd;
- every --flag in a container command, a probe or a unit's ExecStart is
  one the named binary accepts (read from its own --helpfull / --help).
"""
import configparser
import glob
import os
import re
import subprocess
import sys
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def runfile(path):
    base = os.environ.get("TEST_SRCDIR")
    workspace = os.environ.get("TEST_WORKSPACE", "tessera")
    if base:
        candidate = os.path.join(base, workspace, path)
        if os.path.exists(candidate):
            return candidate
    return os.path.join(HERE, "..", path)


def binary_flags(binary, args):
    out = subprocess.run([runfile(binary)] + args, capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    flags = set(re.findall(r"--([a-z][a-z0-9_]*)", text))
    assert flags, "no flags read from %s %s:\n%s" % (binary, " ".join(args), text)
    return flags


COORDINATOR_FLAGS = None
WORKER_FLAGS = None
CLI_FLAGS = None


def flags_of(program):
    global COORDINATOR_FLAGS, WORKER_FLAGS, CLI_FLAGS
    if program == "tessera-coordinator":
        if COORDINATOR_FLAGS is None:
            COORDINATOR_FLAGS = binary_flags("server/tessera-coordinator", ["--helpfull"])
        return COORDINATOR_FLAGS
    if program == "tessera-worker":
        if WORKER_FLAGS is None:
            WORKER_FLAGS = binary_flags("worker/tessera-worker", ["--helpfull"])
        return WORKER_FLAGS
    if program == "tessera":
        if CLI_FLAGS is None:
            CLI_FLAGS = binary_flags("client/tessera", ["health", "--help"])
        return CLI_FLAGS
    raise AssertionError("unknown program " + program)


def flags_used(words):
    """The --flag names in a command line, given as a list of words."""
    return [m.group(1) for w in words for m in [re.match(r"--([a-z][a-z0-9_]*)(=|$)", w)] if m]


def load_k8s():
    docs = []
    for path in sorted(glob.glob(os.path.join(runfile("deploy/k8s"), "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc is not None:
                    docs.append((os.path.basename(path), doc))
    return docs


def pod_specs(docs):
    for name, doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            yield name, doc, doc["spec"]["template"]["spec"]


class KubernetesManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_k8s()
        cls.by_kind = {}
        for _, doc in cls.docs:
            cls.by_kind.setdefault(doc["kind"], []).append(doc)

    def test_every_document_names_itself(self):
        self.assertGreaterEqual(len(self.docs), 7)
        for name, doc in self.docs:
            for key in ("apiVersion", "kind", "metadata"):
                self.assertIn(key, doc, name)
            self.assertTrue(doc["metadata"].get("name"), name)
            if doc["kind"] != "Namespace":
                self.assertEqual(doc["metadata"].get("namespace"), "tessera", name)

    def test_coordinator_deployment_service_and_probes(self):
        [deployment] = [d for d in self.by_kind["Deployment"]
                        if d["metadata"]["name"] == "tessera-coordinator"]
        self.assertEqual(deployment["spec"]["replicas"], 1)
        self.assertEqual(deployment["spec"]["strategy"]["type"], "Recreate")
        template = deployment["spec"]["template"]
        self.assertEqual(deployment["spec"]["selector"]["matchLabels"],
                         {k: template["metadata"]["labels"][k]
                          for k in deployment["spec"]["selector"]["matchLabels"]})
        [container] = template["spec"]["containers"]
        for probe in ("readinessProbe", "livenessProbe"):
            command = container[probe]["exec"]["command"]
            self.assertTrue(command[0].endswith("/tessera"), command)
            self.assertEqual(command[1], "health", command)
        ports = {p["name"] for p in container["ports"]}
        [service] = [s for s in self.by_kind["Service"]
                     if s["metadata"]["name"] == "tessera-coordinator"]
        for key, value in service["spec"]["selector"].items():
            self.assertEqual(template["metadata"]["labels"].get(key), value)
        for port in service["spec"]["ports"]:
            self.assertIn(port["targetPort"], ports)
        args = container["args"]
        advertise = [a for a in args if a.startswith("--advertise_address=")]
        self.assertEqual(advertise, ["--advertise_address=tessera-coordinator.tessera.svc:50051"])

    def test_worker_daemonset_requests_gpus_on_the_host_network(self):
        [daemonset] = self.by_kind["DaemonSet"]
        spec = daemonset["spec"]["template"]["spec"]
        self.assertTrue(spec["hostNetwork"])
        self.assertEqual(spec["dnsPolicy"], "ClusterFirstWithHostNet")
        [container] = spec["containers"]
        self.assertGreaterEqual(int(container["resources"]["limits"]["nvidia.com/gpu"]), 1)
        script = container["args"][0]
        self.assertIn("tessera-worker", script)
        self.assertIn("--coordinator=tessera-coordinator.tessera.svc:50051", script)

    def test_every_mounted_secret_and_key_exists(self):
        secrets = {s["metadata"]["name"]: s for s in self.by_kind["Secret"]}
        for name, doc, spec in pod_specs(self.docs):
            volumes = {v["name"]: v for v in spec["volumes"]}
            for container in spec["containers"]:
                mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
                for volume in mounts:
                    self.assertIn(volume, volumes, "%s mounts an undeclared volume %s" % (name, volume))
                text = " ".join(container.get("command", []) + container.get("args", []))
                for probe in ("readinessProbe", "livenessProbe"):
                    if probe in container:
                        text += " " + " ".join(container[probe]["exec"]["command"])
                # Every file path a flag names lies in a mounted volume; the
                # secret ones exist as keys.
                for path in re.findall(r"=(/[^\s\"']+)", text):
                    owners = [v for v, m in mounts.items() if path == m or path.startswith(m + "/")]
                    if path.startswith("/opt/tessera"):
                        continue  # the image
                    self.assertTrue(owners, "%s: %s is in no mounted volume" % (name, path))
                    volume = volumes[owners[0]]
                    if "secret" in volume:
                        secret = secrets.get(volume["secret"]["secretName"])
                        self.assertIsNotNone(secret, volume["secret"]["secretName"])
                        key = os.path.relpath(path, mounts[owners[0]])
                        self.assertIn(key, secret["stringData"], "%s: no key %s" % (name, key))

    def test_every_flag_is_one_the_binary_accepts(self):
        checked = 0
        for name, doc, spec in pod_specs(self.docs):
            for container in spec["containers"]:
                lines = []
                command = container.get("command", [])
                if command and command[0].endswith(("tessera-coordinator", "tessera-worker")):
                    lines.append(command + container.get("args", []))
                for script in container.get("args", []):
                    for m in re.finditer(r"(/\S*(tessera-worker|tessera-coordinator))((?:\s*\\\n\s*--\S+)+)",
                                         script):
                        lines.append([m.group(1)] + m.group(3).replace("\\", " ").split())
                for probe in ("readinessProbe", "livenessProbe"):
                    if probe in container:
                        lines.append(container[probe]["exec"]["command"])
                for words in lines:
                    program = os.path.basename(words[0])
                    accepted = flags_of(program)
                    for flag in flags_used(words[1:]):
                        self.assertIn(flag, accepted, "%s: %s has no --%s" % (name, program, flag))
                        checked += 1
        self.assertGreater(checked, 20)


class SystemdUnits(unittest.TestCase):
    def read(self, name):
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.optionxform = str
        with open(os.path.join(runfile("deploy/systemd"), name)) as f:
            parser.read_string(f.read())
        return parser

    def exec_words(self, unit):
        return unit["Service"]["ExecStart"].replace("\\\n", " ").split()

    def test_units_restart_and_read_the_environment_file(self):
        for name, program, restart in (("tessera-coordinator.service", "tessera-coordinator", "on-failure"),
                                       ("tessera-worker@.service", "tessera-worker", "always")):
            unit = self.read(name)
            for section in ("Unit", "Service", "Install"):
                self.assertIn(section, unit, name)
            self.assertEqual(unit["Service"]["Restart"], restart, name)
            self.assertEqual(unit["Service"]["EnvironmentFile"], "/etc/tessera/tessera.env")
            words = self.exec_words(unit)
            self.assertEqual(os.path.basename(words[0]), program)
            accepted = flags_of(program)
            used = flags_used(words[1:])
            self.assertGreater(len(used), 5)
            for flag in used:
                self.assertIn(flag, accepted, "%s: %s has no --%s" % (name, program, flag))
            # Every ${VAR} the unit expands is set in tessera.env.
            env = {}
            with open(os.path.join(runfile("deploy/systemd"), "tessera.env")) as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#"):
                        key, _, value = line.partition("=")
                        env[key] = value
            for var in re.findall(r"\$\{([A-Z_]+)\}", unit["Service"]["ExecStart"]):
                self.assertIn(var, env, "%s uses ${%s}" % (name, var))

    def test_worker_template_takes_the_gpu_from_the_instance(self):
        words = self.exec_words(self.read("tessera-worker@.service"))
        self.assertIn("--device=cuda:%i", words)


if __name__ == "__main__":
    sys.argv[1:] = []
    unittest.main()

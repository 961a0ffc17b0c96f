"""Checks of bench/scaling_model.py: the bytes it counts against the model
configs worked out by hand, the properties its projections must have (one
GPU is pure compute, FP8 gathers about half of bf16's bytes, resharding
adds the backward regathers, hybrid sharding past one node adds exposed
time), and the --measured comparison through the command line.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scaling_model  # noqa: E402

JOB_221M = os.path.join(HERE, "jobs", "step_221m.yaml")
JOB_1B = os.path.join(HERE, "jobs", "step_1b.yaml")
PHASES = {"forward": 60.0, "loss": 5.0, "backward": 120.0, "optimizer": 8.0}


class LoadJobTest(unittest.TestCase):
    def test_reads_the_221m_config(self):
        m = scaling_model.load_job(JOB_221M)
        self.assertEqual(m, {"vocab": 32768, "d": 1024, "layers": 12, "heads": 16,
                             "kv_heads": 16, "ffn": 2816, "seq": 2048, "batch": 8})

    def test_reads_the_1b_config(self):
        m = scaling_model.load_job(JOB_1B)
        self.assertEqual((m["d"], m["layers"], m["ffn"], m["batch"]), (2048, 18, 5632, 4))


class BytesTest(unittest.TestCase):
    def setUp(self):
        # A small model whose sizes are easy to count by hand: head_dim 2,
        # 2 kv heads of 4 (grouped-query), so qkv is (4 + 2*2) * 2 * 8 = 128.
        self.m = {"vocab": 10, "d": 8, "layers": 4, "heads": 4, "kv_heads": 2,
                  "ffn": 16, "seq": 4, "batch": 2}

    def test_block_params(self):
        linears, norms = scaling_model.block_params(self.m)
        # qkv 128 + out 64 + gate/up 2*16*8 + down 8*16
        self.assertEqual(linears, 128 + 64 + 256 + 128)
        self.assertEqual(norms, 16)

    def test_gathered_bytes_fp8_and_bf16(self):
        linears, norms = 576, 16
        outer = (2 * 10 * 8 + 8) * 2  # embedding, LM head and final norm in bf16
        per, total = scaling_model.gathered_bytes(self.m, fp8=True, reshard=False)
        self.assertEqual(per, linears * 1 + norms * 2)
        self.assertEqual(total, 4 * per + outer)
        per, total = scaling_model.gathered_bytes(self.m, fp8=False, reshard=False)
        self.assertEqual(per, linears * 2 + norms * 2)
        self.assertEqual(total, 4 * per + outer)

    def test_reshard_regathers_all_but_the_last_two_blocks(self):
        per, once = scaling_model.gathered_bytes(self.m, fp8=True, reshard=False)
        _, twice = scaling_model.gathered_bytes(self.m, fp8=True, reshard=True)
        self.assertEqual(twice - once, (4 - 2) * per)

    def test_total_params_of_the_named_models(self):
        self.assertAlmostEqual(scaling_model.total_params(scaling_model.load_job(JOB_221M)) / 221e6,
                               1.0, delta=0.02)
        self.assertAlmostEqual(scaling_model.total_params(scaling_model.load_job(JOB_1B)) / 1.1e9,
                               1.0, delta=0.1)

    def test_fp8_all_gather_is_about_half_of_bf16(self):
        for job in (JOB_221M, JOB_1B):
            m = scaling_model.load_job(job)
            fp8 = scaling_model.predict(m, PHASES, 8, fp8=True)["all_gather_bytes_per_step"]
            bf16 = scaling_model.predict(m, PHASES, 8, fp8=False)["all_gather_bytes_per_step"]
            self.assertGreater(bf16, 0)
            # Only the norms, embedding and LM head stay bf16.
            self.assertGreater(fp8 / bf16, 0.5, job)
            self.assertLess(fp8 / bf16, 0.62, job)


class PredictTest(unittest.TestCase):
    def setUp(self):
        self.m = scaling_model.load_job(JOB_221M)

    def test_one_gpu_is_the_measured_compute(self):
        row = scaling_model.predict(self.m, PHASES, 1)
        self.assertEqual(row["step_ms"], sum(PHASES.values()))
        self.assertEqual(row["efficiency"], 1.0)
        self.assertEqual(row["exposed_comm_ms"], 0.0)
        self.assertEqual(row["all_gather_bytes_per_step"], 0)
        self.assertEqual(row["tokens_per_s_per_gpu"], round(8 * 2048 / sum(PHASES.values()) * 1e3))

    def test_layout_fsdp_in_a_node_then_hybrid(self):
        layouts = {w: (scaling_model.predict(self.m, PHASES, w)["shard_group"],
                       scaling_model.predict(self.m, PHASES, w)["replicas"])
                   for w in (1, 2, 8, 64, 512)}
        self.assertEqual(layouts, {1: (1, 1), 2: (2, 1), 8: (8, 1), 64: (8, 8), 512: (8, 64)})

    def test_efficiency_bounds(self):
        # Sharding divides the optimizer's time by the shard group, so a
        # world of g can beat one GPU by at most that; across nodes the
        # replica all-reduce only takes away.
        total = sum(PHASES.values())
        for fp8 in (True, False):
            eff = {w: scaling_model.predict(self.m, PHASES, w, fp8=fp8)["efficiency"]
                   for w in (1, 2, 8, 64, 512)}
            for w in (2, 8, 64, 512):
                g = min(w, 8)
                bound = total / (total - PHASES["optimizer"] * (1 - 1 / g))
                self.assertLessEqual(eff[w], round(bound, 4) + 1e-4, (w, eff))
            self.assertLessEqual(eff[64], eff[8], eff)
            self.assertLessEqual(eff[512], eff[64], eff)
            self.assertGreater(eff[512], 0.0)

    def test_replicas_add_exposed_all_reduce(self):
        one_node = scaling_model.predict(self.m, PHASES, 8)
        hybrid = scaling_model.predict(self.m, PHASES, 64)
        self.assertGreater(hybrid["exposed_comm_ms"], one_node["exposed_comm_ms"])
        # Within the shard group the bytes are the same: groups stay at 8.
        self.assertEqual(hybrid["all_gather_bytes_per_step"], one_node["all_gather_bytes_per_step"])

    def test_slow_links_are_exposed(self):
        fast = scaling_model.predict(self.m, PHASES, 8, nvlink_gbs=360.0)
        slow = scaling_model.predict(self.m, PHASES, 8, nvlink_gbs=1.0)
        self.assertGreater(slow["exposed_comm_ms"], 10 * fast["exposed_comm_ms"])
        self.assertLess(slow["efficiency"], 0.5)

    def test_ring_factor(self):
        two = scaling_model.predict(self.m, PHASES, 2)["all_gather_bytes_per_step"]
        eight = scaling_model.predict(self.m, PHASES, 8)["all_gather_bytes_per_step"]
        self.assertAlmostEqual(eight / two, (7 / 8) / (1 / 2), places=3)


class CommandLineTest(unittest.TestCase):
    def run_model(self, *args):
        out = subprocess.run([sys.executable, os.path.join(HERE, "scaling_model.py"), *args],
                             capture_output=True, text=True, check=True)
        return out.stdout

    def test_measured_lines_get_their_error(self):
        expected = scaling_model.predict(scaling_model.load_job(JOB_221M), PHASES, 2)
        measured = expected["tokens_per_s_per_gpu"] / 1.1  # the model predicts 10% more
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "measured.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps({"model": "221m", "world": 2, "impl": "tessera-fp8",
                                    "tokens_per_s_per_gpu": measured}) + "\n")
                f.write(json.dumps({"model": "1b", "world": 2, "impl": "tessera-fp8",
                                    "tokens_per_s_per_gpu": 1.0}) + "\n")
                f.write(json.dumps({"model": "221m", "world": 2, "impl": "tessera-bf16",
                                    "tokens_per_s_per_gpu": 1.0}) + "\n")
            args = ["--job", JOB_221M, "--worlds", "1,2"] + [
                f"--{k}-ms={v}" for k, v in PHASES.items()]
            rows = [json.loads(l) for l in self.run_model(
                *args, "--measured", path, "--label", "221m", "--json").splitlines()]
            table = self.run_model(*args, "--measured", path, "--label", "221m")
        self.assertEqual([r["world"] for r in rows], [1, 2])
        self.assertNotIn("error", rows[0])
        self.assertAlmostEqual(rows[1]["error"], 0.1, places=3)
        self.assertIn("+10.0%", table)

    def test_missing_phases_are_refused(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "scaling_model.py"),
                              "--job", JOB_221M, "--forward-ms", "1"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--measured-1gpu", out.stderr)


if __name__ == "__main__":
    unittest.main()

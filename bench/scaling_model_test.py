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


class LayoutTest(unittest.TestCase):
    def setUp(self):
        self.m = scaling_model.load_job(JOB_221M)

    def test_a_shard_group_divides_the_world_and_fits_a_node(self):
        self.assertEqual(scaling_model.layout(8, 4), (4, 2))
        self.assertEqual(scaling_model.layout(8, 8), (8, 1))
        self.assertEqual(scaling_model.layout(8, 1), (1, 8))
        self.assertEqual(scaling_model.layout(64), (8, 8))
        for world, group in ((8, 3), (32, 16)):
            with self.assertRaisesRegex(ValueError, "must divide"):
                scaling_model.layout(world, group)

    def test_hybrid_inside_a_node_all_reduces_over_nvlink(self):
        # 2 x 4 on one 8-GPU node against the same layout split over two
        # 4-GPU nodes: only the replica all-reduce's link differs.
        one_node = scaling_model.predict(self.m, PHASES, 8, shard_group=4)
        two_nodes = scaling_model.predict(self.m, PHASES, 8, shard_group=4, gpus_per_node=4)
        self.assertEqual((one_node["shard_group"], one_node["replicas"]), (4, 2))
        self.assertEqual((two_nodes["shard_group"], two_nodes["replicas"]), (4, 2))
        self.assertLess(one_node["exposed_comm_ms"], two_nodes["exposed_comm_ms"])
        # Against FSDP over all 8: a quarter of the gathered bytes less.
        fsdp = scaling_model.predict(self.m, PHASES, 8)
        self.assertLess(one_node["all_gather_bytes_per_step"], fsdp["all_gather_bytes_per_step"])


class RefitTest(unittest.TestCase):
    """Runs made by the model itself at a known overlap cost must give that
    cost back, with no error; the command line reads scaling.jsonl calls."""

    def runs(self, cost, phases_by_model):
        rows = []
        for name, phases in phases_by_model.items():
            m = scaling_model.load_job(os.path.join(HERE, "jobs", f"step_{name}.yaml"))
            rows.append({"model": name, "world": 1, "impl": "tessera-fp8", "phases_ms": phases,
                         "tokens_per_s_per_gpu": 1.0})
            for world, group in ((2, None), (4, None), (8, 4)):
                p = scaling_model.predict(m, phases, world, overlap_cost=cost, shard_group=group)
                row = {"model": name, "world": world, "impl": "tessera-fp8",
                       "tokens_per_s_per_gpu": m["batch"] * m["seq"] / p["step_ms"] * 1e3}
                if group:
                    row["shard_group"] = group
                rows.append(row)
        return rows

    def job_for(self, row):
        return os.path.join(HERE, "jobs", f"step_{row['model']}.yaml")

    def test_closed_form(self):
        # fixed 10, hidden 10: measured 15 and 20 want c = 0.5 and 1.
        self.assertAlmostEqual(scaling_model.fit_overlap_cost([(10, 10, 15)]), 0.5)
        self.assertAlmostEqual(scaling_model.fit_overlap_cost([(10, 10, 20)]), 1.0)
        # Both: relative errors weigh the shorter step more, so between
        # 0.5 and 1, nearer 0.5: (2/3 * 1/3 + 1/2 * 1/2) / ((2/3)^2 + (1/2)^2).
        self.assertAlmostEqual(scaling_model.fit_overlap_cost([(10, 10, 15), (10, 10, 20)]),
                               0.68, places=6)
        self.assertEqual(scaling_model.fit_overlap_cost([(10, 10, 9)]), 0.0)  # never negative
        self.assertIsNone(scaling_model.fit_overlap_cost([(10, 0, 12)]))

    def test_the_cost_the_runs_were_made_with_comes_back(self):
        calls = [self.runs(0.35, {"221m": PHASES}),
                 self.runs(0.35, {"1b": {"forward": 23.0, "loss": 4.6, "backward": 50.0,
                                         "optimizer": 8.8}})]
        cost, fitted, projections = scaling_model.refit(calls, self.job_for, [1, 8, 64])
        self.assertAlmostEqual(cost, 0.35, places=2)
        self.assertEqual(len(fitted), 6)
        for row in fitted:
            self.assertLess(abs(row["error"]), 0.002, row)
        self.assertEqual([(r["model"], r["world"]) for r in projections],
                         [("1b", 1), ("1b", 8), ("1b", 64), ("221m", 1), ("221m", 8), ("221m", 64)])
        hsdp = [r for r in fitted if r["world"] == 8]
        self.assertEqual({(r["shard_group"], r["replicas"]) for r in hsdp}, {(4, 2)})

    def test_a_run_is_paired_only_with_its_own_calls_one_gpu_run(self):
        # The multi-GPU runs of the second call have no 1-GPU run there.
        first = self.runs(0.5, {"221m": PHASES})
        second = [r for r in self.runs(2.0, {"221m": PHASES}) if r["world"] > 1]
        cost, fitted, _ = scaling_model.refit([first, second], self.job_for, [8])
        self.assertAlmostEqual(cost, 0.5, places=2)
        self.assertEqual(len(fitted), 3)

    def test_the_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            one = os.path.join(tmp, "one.jsonl")
            many = os.path.join(tmp, "many.jsonl")
            rows = self.runs(0.6, {"221m": PHASES})
            with open(one, "w") as f:
                f.write(json.dumps(rows[0]) + "\n")
            with open(many, "w") as f:
                f.write("== a line that is not JSON\n")
                for r in rows[1:]:
                    f.write(json.dumps(r) + "\n")
            out = subprocess.run([sys.executable, os.path.join(HERE, "scaling_model.py"),
                                  "--fit", f"{one},{many}", "--worlds", "8,64"],
                                 capture_output=True, text=True, check=True).stdout
            self.assertIn("overlap cost refitted to 3 multi-GPU runs: 0.60", out)
            self.assertIn("| 221m | tessera-fp8 | 8 | 4 x 2 |", out)
            self.assertIn("| 221m | tessera-fp8 | 64 | 8 x 8 |", out)
            lonely = subprocess.run([sys.executable, os.path.join(HERE, "scaling_model.py"),
                                     "--fit", many], capture_output=True, text=True)
            self.assertEqual(lonely.returncode, 1)
            self.assertIn("no multi-GPU Tessera run with a 1-GPU run", lonely.stderr)


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

    def test_a_shard_group_that_does_not_divide_is_refused(self):
        args = [sys.executable, os.path.join(HERE, "scaling_model.py"), "--job", JOB_221M,
                "--worlds", "8"] + [f"--{k}-ms={v}" for k, v in PHASES.items()]
        out = subprocess.run(args + ["--shard-group", "3"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--shard-group: shard group 3 must divide the world 8", out.stderr)
        table = subprocess.run(args + ["--shard-group", "4"], capture_output=True, text=True,
                               check=True).stdout
        self.assertIn("| 8 | 4 x 2 |", table)

    def test_missing_phases_are_refused(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "scaling_model.py"),
                              "--job", JOB_221M, "--forward-ms", "1"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--measured-1gpu", out.stderr)


if __name__ == "__main__":
    unittest.main()

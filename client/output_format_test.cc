// Output formatting: durations, rates, progress line with ETA, tables,
// summary and JSON.
#include "client/output_format.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(OutputFormat, DurationsAndRates) {
  EXPECT_EQ(FormatDuration(0), "0:00");
  EXPECT_EQ(FormatDuration(65), "1:05");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "-");
  EXPECT_EQ(FormatRate(950), "950");
  EXPECT_EQ(FormatRate(12345), "12.3k");
  EXPECT_EQ(FormatRate(4.56e6), "4.56M");
}

TEST(OutputFormat, ProgressLineAndEta) {
  ProgressTracker p(100);
  EXPECT_LT(p.EtaSeconds(), 0);
  for (int s = 0; s < 10; ++s) {
    v1::StepMetrics m;
    m.set_step(s);
    m.set_loss(2.5f);
    m.set_tokens_per_s(12345);
    p.Add(m, 100.0 + 0.5 * s);  // 0.5 s per step
  }
  EXPECT_NEAR(p.EtaSeconds(), 90 * 0.5, 1e-6);
  std::string line = p.Line(10);
  EXPECT_NE(line.find("step 10/100"), std::string::npos) << line;
  EXPECT_NE(line.find("[#.........]"), std::string::npos) << line;
  EXPECT_NE(line.find("loss 2.5000"), std::string::npos) << line;
  EXPECT_NE(line.find("12.3k"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 0:45"), std::string::npos) << line;
}

TEST(OutputFormat, ValidationLossInStatusWatchSummaryAndJson) {
  ProgressTracker p(10);
  v1::StepMetrics m;
  m.set_step(0);
  m.set_loss(2.5f);
  p.Add(m, 1.0);
  EXPECT_EQ(p.Line(10).find("val"), std::string::npos) << p.Line(10);  // none yet
  m.set_step(1);
  m.mutable_validation()->set_loss(2.75f);
  m.mutable_validation()->set_tokens(4096);
  p.Add(m, 2.0);
  EXPECT_NE(p.Line(10).find("loss 2.5000  val 2.7500"), std::string::npos) << p.Line(10);
  m.set_step(2);
  m.clear_validation();
  p.Add(m, 3.0);  // the newest evaluation stays on the line until the next one
  EXPECT_NE(p.Line(10).find("val 2.7500"), std::string::npos) << p.Line(10);

  v1::Job job;
  job.mutable_spec()->set_steps(10);
  job.set_steps_done(10);
  job.set_state(v1::SUCCEEDED);
  job.mutable_last_metrics()->set_step(9);
  job.mutable_last_metrics()->set_loss(1.5f);
  EXPECT_EQ(FormatJob(job).find("validation"), std::string::npos);
  EXPECT_EQ(FormatSummary(job, 0, 0).find("validation"), std::string::npos);
  job.mutable_last_metrics()->mutable_validation()->set_loss(1.625f);
  job.mutable_last_metrics()->mutable_validation()->set_tokens(4096);
  EXPECT_NE(FormatJob(job).find("validation loss 1.6250 over 4.1k tokens, after step 10"),
            std::string::npos)
      << FormatJob(job);
  EXPECT_NE(FormatSummary(job, 0, 0).find("validation   1.6250 (after step 10)"),
            std::string::npos)
      << FormatSummary(job, 0, 0);
  // --json (status and watch) carries the message with proto field names.
  const std::string json = ToJsonLine(job.last_metrics());
  EXPECT_NE(json.find("\"validation\":{\"loss\":1.625,\"tokens\":\"4096\"}"), std::string::npos)
      << json;

  // Validation sources: one loss per source in status, the summary and watch.
  v1::SourceValidationLoss* web = job.mutable_last_metrics()->mutable_validation()->add_sources();
  web->set_path("/data/val/web/");
  web->set_loss(1.5f);
  web->set_tokens(2048);
  v1::SourceValidationLoss* code = job.mutable_last_metrics()->mutable_validation()->add_sources();
  code->set_path("/data/val/code.tok");
  code->set_loss(1.75f);
  code->set_tokens(2048);
  EXPECT_NE(FormatJob(job).find("  source  /data/val/web/  loss 1.5000 over 2.0k tokens\n"
                                "  source  /data/val/code.tok  loss 1.7500 over 2.0k tokens\n"),
            std::string::npos)
      << FormatJob(job);
  EXPECT_NE(FormatSummary(job, 0, 0).find("    /data/val/code.tok  1.7500\n"), std::string::npos)
      << FormatSummary(job, 0, 0);
  ProgressTracker watched(10);
  watched.Add(job.last_metrics(), 1.0);
  EXPECT_NE(watched.Line(10).find("val 1.6250 (web 1.5000, code.tok 1.7500)"), std::string::npos)
      << watched.Line(10);
}

TEST(OutputFormat, ShadowLinesOnShadowStepsWithTheWarningWhenFlagged) {
  v1::StepMetrics m;
  m.set_step(99);
  EXPECT_EQ(ShadowLines(m), "");
  v1::ShadowLoss* shadow = m.mutable_shadow();
  shadow->set_fp8_loss(3.2101f);
  shadow->set_bf16_loss(3.2034f);
  shadow->set_gap(3.2101f - 3.2034f);
  shadow->set_tokens(4096);
  shadow->set_time_s(0.0123);
  EXPECT_EQ(ShadowLines(m),
            "shadow: fp8 3.2101 bf16 3.2034 gap +0.0067 after step 100 (held-out batch, "
            "4.1k tokens, 12.3 ms)\n");
  shadow->set_warning("FP8 loss 3.2101 is +0.0067 from its bf16 shadow");
  EXPECT_EQ(ShadowLines(m),
            "shadow: fp8 3.2101 bf16 3.2034 gap +0.0067 after step 100 (held-out batch, "
            "4.1k tokens, 12.3 ms)\nWARNING: FP8 loss 3.2101 is +0.0067 from its bf16 shadow\n");
  v1::Job job;
  job.set_steps_done(100);
  *job.mutable_last_metrics() = m;
  EXPECT_NE(FormatJob(job).find("shadow: fp8 3.2101"), std::string::npos) << FormatJob(job);
}

TEST(OutputFormat, TablesSummaryAndJson) {
  v1::Job job;
  job.set_id("job-4");
  job.mutable_spec()->set_name("demo");
  job.mutable_spec()->set_steps(10);
  job.set_state(v1::SUCCEEDED);
  job.set_reason("completed 10 steps");
  job.set_steps_done(10);
  job.mutable_last_metrics()->set_loss(1.25f);
  job.set_start_time_unix_ms(1000);
  job.set_end_time_unix_ms(31000);
  job.set_mean_control_overhead_s(0.0005);
  std::string table = FormatJobsTable({job});
  EXPECT_NE(table.find("job-4"), std::string::npos);
  EXPECT_NE(table.find("10/10"), std::string::npos);
  EXPECT_NE(table.find("1.2500"), std::string::npos);
  std::string summary = FormatSummary(job, 1000, 2.0);
  EXPECT_NE(summary.find("SUCCEEDED"), std::string::npos);
  EXPECT_NE(summary.find("final loss   1.2500"), std::string::npos) << summary;
  EXPECT_NE(summary.find("500"), std::string::npos) << summary;  // tokens/s
  EXPECT_NE(summary.find("0:30"), std::string::npos) << summary;  // wall time
  EXPECT_NE(summary.find("0.500 ms/step"), std::string::npos) << summary;
  std::string json = ToJsonLine(job);
  EXPECT_NE(json.find("\"id\":\"job-4\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"steps_done\":10"), std::string::npos) << json;
  v1::WorkerRecord w;
  w.set_worker_id("w-1");
  w.set_healthy(false);
  w.set_health_reason("cuda fault");
  EXPECT_NE(FormatWorkersTable({w}).find("no: cuda fault"), std::string::npos);
}

TEST(OutputFormat, StatusShowsStepPhasesAndMfuOnlyWhenKnown) {
  v1::Job job;
  job.set_id("job-5");
  job.mutable_spec()->set_steps(3);
  job.set_steps_done(3);
  EXPECT_EQ(FormatJob(job).find("phases"), std::string::npos);  // none reported
  EXPECT_EQ(FormatJob(job).find("mfu"), std::string::npos);
  v1::StepPhases* p = job.mutable_last_metrics()->mutable_phases();
  p->set_forward_s(0.0123);
  p->set_loss_s(0.004);
  p->set_backward_s(0.031);
  p->set_optimizer_s(0.002);
  p->set_collective_s(0.0055);
  p->set_host_s(0.0004);
  std::string text = FormatJob(job);
  EXPECT_NE(text.find("forward 12.30  loss 4.00  backward 31.00  optimizer 2.00  "
                      "collectives 5.50  host 0.40 ms"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("mfu"), std::string::npos) << text;  // CPU workers: no MFU
  EXPECT_EQ(text.find("waits"), std::string::npos) << text;  // no sites reported
  // The sites of the collectives' wait, largest first, those under 10 us left out.
  v1::CollectiveWaits* w = p->mutable_collective_waits();
  w->set_first_gather_s(0.0004);
  w->set_final_reduce_s(0.0031);
  w->set_all_reduce_s(0.0020);
  w->set_forward_gather_s(0.000004);
  text = FormatJob(job);
  EXPECT_NE(text.find("waits     final reduce 3.10  all-reduces 2.00  first gather 0.40 ms"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("forward gathers"), std::string::npos) << text;
  job.mutable_last_metrics()->set_mfu(0.4321);
  text = FormatJob(job);
  EXPECT_NE(text.find("mfu       43.2%"), std::string::npos) << text;
  const std::string json = ToJsonLine(job);
  EXPECT_NE(json.find("\"collective_s\":0.0055"), std::string::npos) << json;
  EXPECT_NE(json.find("\"mfu\":0.4321"), std::string::npos) << json;
  // The fullest rank's peak memory, once reported.
  EXPECT_EQ(text.find("memory "), std::string::npos) << text;
  job.mutable_last_metrics()->set_peak_memory_bytes(int64_t{3} << 29);
  job.mutable_last_metrics()->set_peak_memory_rank(2);
  text = FormatJob(job);
  EXPECT_NE(text.find("memory    1.50 GiB peak on rank 2"), std::string::npos) << text;
  EXPECT_NE(ToJsonLine(job).find("\"peak_memory_bytes\":\"1610612736\""), std::string::npos)
      << ToJsonLine(job);
}

TEST(OutputFormat, StatusShowsRestartsAndWorkersShowWhatTheyAreAborting) {
  v1::Job job;
  job.set_id("job-6");
  job.mutable_spec()->set_steps(10);
  EXPECT_EQ(FormatJob(job).find("restarts"), std::string::npos);  // no restart policy
  job.mutable_spec()->set_max_restarts(2);
  job.set_restarts(1);
  job.set_committed_step(6);
  EXPECT_NE(FormatJob(job).find("restarts  1 of 2 (newest checkpoint: step 6)"),
            std::string::npos)
      << FormatJob(job);
  const std::string json = ToJsonLine(job);
  EXPECT_NE(json.find("\"restarts\":1"), std::string::npos) << json;

  v1::WorkerRecord orphaned;
  orphaned.set_worker_id("w-2");
  orphaned.set_healthy(true);
  orphaned.mutable_activity()->set_job_id("job-1");
  EXPECT_NE(FormatWorkersTable({orphaned}).find("aborting job-1"), std::string::npos);
  orphaned.set_job_id("job-7");
  EXPECT_NE(FormatWorkersTable({orphaned}).find("job-7"), std::string::npos);
}

TEST(OutputFormat, StatusNamesEachSlowRankWithItsWorkerAddressAndWindow) {
  v1::Job job;
  job.set_id("job-8");
  job.mutable_spec()->set_steps(1000);
  EXPECT_EQ(FormatJob(job).find("slow"), std::string::npos);
  v1::SlowRank* r = job.add_slow_ranks();
  r->set_rank(1);
  r->set_worker_id("w-2");
  r->set_address("10.0.0.7:40121");
  r->set_slowdown(0.35);
  r->set_rank_compute_s(0.027);
  r->set_median_compute_s(0.02);
  r->set_window_steps(50);
  r->set_step(149);
  EXPECT_NE(FormatJob(job).find("slow      rank 1 (worker w-2 at 10.0.0.7:40121): 35% slower "
                                "than the median rank, median compute 0.0270 s/step against "
                                "0.0200 s over steps 100-149\n"),
            std::string::npos)
      << FormatJob(job);
  EXPECT_NE(ToJsonLine(job).find("\"slow_ranks\":[{\"rank\":1"), std::string::npos)
      << ToJsonLine(job);
}

TEST(OutputFormat, CheckpointIntervalLineSaysWhenTrainingWouldWait) {
  EXPECT_EQ(CheckpointIntervalLine(int64_t{105'444'504'600}, 125),
            "# checkpoint write: about 105.4 s at 1 GB/s; every 125 steps, training waits for the "
            "previous write unless a step takes 0.844 s or more\n");
  EXPECT_EQ(CheckpointIntervalLine(int64_t{105'444'504'600}, 0), "");
}

// The dry run's attention line follows the engine's rule: Tessera's
// kernels under AUTO for both backwards (the 8B shape: its one-pass
// backward's dQ sums; the atomic form's need no turn counters), each
// named kernel set when named (cuDNN's deterministic backward in key bands
// past its workspace limit: 4.21 GiB in 4 at 16384 tokens and head dim 64,
// 33.21 GiB in 8 at 65536; with document masking the ragged batches'
// limit); nothing for CPU jobs.
TEST(OutputFormat, AttentionLineSaysWhichKernelsAndTheirWorkspace) {
  v1::JobSpec spec;
  spec.set_device_kind(v1::CUDA);
  v1::ModelConfig* m = spec.mutable_model();
  m->set_d_model(4096);
  m->set_n_heads(32);
  m->set_n_kv_heads(8);
  m->set_seq_len(8192);
  spec.mutable_data()->set_micro_batch_size(1);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: Tessera's kernels (AUTO), deterministic backward, "
            "workspace 0.13 GiB per rank (counted above)\n");
  spec.set_nondeterministic_attention_backward(true);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: Tessera's kernels (AUTO), atomic (nondeterministic) backward, "
            "workspace 0.13 GiB per rank (counted above)\n");
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_TESSERA);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: Tessera's kernels (ATTENTION_KERNELS_TESSERA), atomic "
            "(nondeterministic) backward, workspace 0.13 GiB per rank (counted above)\n");
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_CUDNN);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: cuDNN (CUDNN), atomic (nondeterministic) backward, workspace 0.27 GiB "
            "per rank (counted above); ATTENTION_KERNELS_TESSERA takes 0.13 GiB\n");
  spec.set_nondeterministic_attention_backward(false);
  // Head dim 64.
  m->set_d_model(2048);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: cuDNN (CUDNN), deterministic backward, workspace 4.08 GiB per rank "
            "(counted above); ATTENTION_KERNELS_TESSERA takes 0.06 GiB, "
            "nondeterministic_attention_backward 0.14 GiB\n");
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_AUTO);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: Tessera's kernels (AUTO), deterministic backward, "
            "workspace 0.06 GiB per rank (counted above)\n");
  m->set_seq_len(16384);
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_CUDNN);
  EXPECT_NE(AttentionLine(spec).find(
                "cuDNN (CUDNN), deterministic backward in 4 key bands, workspace 4.21 GiB"),
            std::string::npos)
      << AttentionLine(spec);
  m->set_seq_len(65536);
  EXPECT_NE(AttentionLine(spec).find(
                "cuDNN (CUDNN), deterministic backward in 8 key bands, workspace 33.21 GiB"),
            std::string::npos)
      << AttentionLine(spec);
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_TESSERA);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: Tessera's kernels (ATTENTION_KERNELS_TESSERA), deterministic "
            "backward, workspace 0.52 GiB per rank (counted above)\n");
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_CUDNN);
  spec.mutable_data()->set_document_masking(true);
  m->set_seq_len(8192);
  EXPECT_NE(AttentionLine(spec).find("cuDNN (CUDNN), deterministic backward, workspace 4.27 GiB"),
            std::string::npos)
      << AttentionLine(spec);
  EXPECT_NE(AttentionLine(spec).find("documents run as cuDNN's ragged batches where they average "
                                     "512 tokens or more"),
            std::string::npos);
  spec.set_attention_kernels(v1::ATTENTION_KERNELS_AUTO);
  EXPECT_EQ(AttentionLine(spec),
            "# attention: Tessera's kernels (AUTO), deterministic backward, "
            "workspace 0.06 GiB per rank (counted above)\n");
  m->set_d_model(4096);
  EXPECT_NE(AttentionLine(spec).find("Tessera's kernels (AUTO), deterministic"),
            std::string::npos)
      << AttentionLine(spec);
  spec.set_device_kind(v1::CPU);
  EXPECT_EQ(AttentionLine(spec), "");
}

// A commit line: bytes over all ranks, commit time, the slowest writing
// rank's speed (a replica that wrote nothing is not it), the stall, and
// the warning when training waited for the previous write. Status shows
// the checkpoint size and the newest committed step.
TEST(OutputFormat, CheckpointCommitLineAndStatus) {
  v1::CheckpointCommitted c;
  c.set_step(120);
  c.set_bytes(int64_t{3} << 30);
  c.set_write_s(15.14);
  c.set_stall_s(0.138);
  for (double gbps : {0.46, 0.51, 0.0}) {
    v1::RankCheckpointWrite* r = c.add_ranks();
    r->set_bytes(gbps > 0 ? 100 : 0);
    r->set_write_gb_per_s(gbps);
  }
  EXPECT_EQ(CheckpointLine(c), "[checkpoint] step 120 committed: 3.00 GiB in 15.14 s (0.46 GB/s), "
                               "training stalled 0.14 s");
  c.set_warning("training waited 4.16 s");
  EXPECT_EQ(CheckpointLine(c), "[checkpoint] step 120 committed: 3.00 GiB in 15.14 s (0.46 GB/s), "
                               "training stalled 0.14 s\n[checkpoint] WARNING: training waited 4.16 s");
  c.set_prune_s(35.24);
  EXPECT_EQ(CheckpointLine(c), "[checkpoint] step 120 committed: 3.00 GiB in 15.14 s (0.46 GB/s), "
                               "training stalled 0.14 s; older steps removed in 35.2 s\n"
                               "[checkpoint] WARNING: training waited 4.16 s");

  v1::Job j;
  j.set_id("job-1");
  j.mutable_spec()->set_steps(360);
  j.mutable_spec()->mutable_checkpoint()->set_dir("/ck");
  j.mutable_spec()->mutable_checkpoint()->set_interval_steps(120);
  EXPECT_EQ(FormatJob(j).find("checkpoint"), std::string::npos);  // size unknown: no line
  j.set_checkpoint_bytes(int64_t{13} << 30);
  j.set_committed_step(240);
  EXPECT_NE(FormatJob(j).find("checkpoint 13.00 GiB each, every 120 steps under /ck (newest "
                              "committed: step 240)\n"),
            std::string::npos)
      << FormatJob(j);
}

}  // namespace
}  // namespace tessera

// The status page's script (server/status_page.h): polls /api/jobs and the
// selected job's /api/jobs/ID/steps every two seconds and redraws the
// tables and the loss chart. Every value from the server is set as text,
// never as markup. The chart canvas records what it drew in data
// attributes (data-job, data-points, data-validation-points), which the
// page's browser test reads.
"use strict";

const POLL_MS = 2000;
let selectedJob = decodeURIComponent(location.hash.replace(/^#/, ""));
let lastSteps = null;

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function formatNumber(v, digits) {
  return v === null || v === undefined ? "–" : Number(v).toFixed(digits);
}

function formatRate(v) {
  if (v === null || v === undefined) return "–";
  return v >= 1e6 ? (v / 1e6).toFixed(2) + "M" : v >= 1e3 ? (v / 1e3).toFixed(1) + "k" : v.toFixed(0);
}

function renderJobs(jobs) {
  const body = document.getElementById("jobs");
  body.replaceChildren();
  if (jobs.length === 0) {
    const row = body.insertRow();
    cell(row, "no jobs yet", "empty").colSpan = 9;
    return;
  }
  for (const job of jobs) {
    const row = body.insertRow();
    row.className = "job" + (job.id === selectedJob ? " selected" : "");
    row.addEventListener("click", () => {
      selectedJob = job.id;
      location.hash = encodeURIComponent(job.id);
      refresh();
    });
    cell(row, job.id);
    cell(row, job.name);
    cell(row, job.state, "state " + job.state);
    cell(row, job.world_size + " × " + job.device_kind);
    cell(row, job.steps_done + " / " + job.steps, "num");
    cell(row, formatNumber(job.loss, 4), "num");
    cell(row, formatRate(job.tokens_per_s), "num");
    cell(row, job.mfu ? (100 * job.mfu).toFixed(1) + "%" : "–", "num");
    cell(row, job.reason, "reason");
  }
}

function renderWorkers(workers) {
  const body = document.getElementById("workers");
  body.replaceChildren();
  if (workers.length === 0) {
    const row = body.insertRow();
    cell(row, "no workers registered", "empty").colSpan = 6;
    return;
  }
  for (const w of workers) {
    const row = body.insertRow();
    cell(row, w.id);
    cell(row, w.address);
    cell(row, w.device + (w.host ? " on " + w.host : ""));
    cell(row, w.healthy ? "healthy" : "unhealthy: " + w.health_reason, w.healthy ? "" : "state FAILED");
    cell(row, w.job_id || "idle");
    cell(row, w.heartbeat_age_s < 0 ? "–" : w.heartbeat_age_s.toFixed(1) + " s ago", "num");
  }
}

// Picks the job to chart: the one in the URL, else the newest running one,
// else the newest.
function chooseJob(jobs) {
  if (jobs.some((j) => j.id === selectedJob)) return selectedJob;
  const running = jobs.find((j) => j.state === "RUNNING");
  return running ? running.id : jobs.length > 0 ? jobs[0].id : "";
}

function niceRange(lo, hi) {
  if (!(hi > lo)) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

function drawChart(data) {
  const canvas = document.getElementById("loss-chart");
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);

  const train = data ? data.train.filter((p) => p[1] !== null) : [];
  const validation = data ? data.validation.filter((p) => p[1] !== null) : [];
  canvas.dataset.job = data ? data.id : "";
  canvas.dataset.points = String(train.length);
  canvas.dataset.validationPoints = String(validation.length);
  const left = 56, right = 16, top = 12, bottom = 28;
  const plotW = width - left - right, plotH = height - top - bottom;
  ctx.font = "12px system-ui, sans-serif";
  ctx.fillStyle = "#6a7383";
  if (train.length === 0 && validation.length === 0) {
    ctx.fillText(data ? "no steps yet" : "no job selected", left, top + 20);
    return;
  }
  const all = train.concat(validation);
  // The steps reported so far fill the width; the summary says how many
  // the job will run.
  const maxStep = Math.max(...all.map((p) => p[0]), 1);
  const [yLo, yHi] = niceRange(Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1])));
  const x = (step) => left + (plotW * step) / maxStep;
  const y = (loss) => top + plotH * (1 - (loss - yLo) / (yHi - yLo));

  // Axes and grid: five loss levels, steps 0 and the last.
  ctx.strokeStyle = "#e3e6eb";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const v = yLo + ((yHi - yLo) * i) / 4;
    ctx.beginPath();
    ctx.moveTo(left, y(v));
    ctx.lineTo(left + plotW, y(v));
    ctx.stroke();
    ctx.fillText(v.toFixed(3), left - 6, y(v));
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  ctx.fillText("0", x(0), top + plotH + 8);
  ctx.fillText(String(maxStep), x(maxStep), top + plotH + 8);
  ctx.fillText("step", left + plotW / 2, top + plotH + 8);

  function series(points, color, dots) {
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    points.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p[0]), y(p[1])) : ctx.lineTo(x(p[0]), y(p[1]))));
    ctx.stroke();
    if (dots || points.length === 1) {
      for (const p of points) {
        ctx.beginPath();
        ctx.arc(x(p[0]), y(p[1]), 3, 0, 2 * Math.PI);
        ctx.fill();
      }
    }
  }
  series(train, "#2563eb", false);
  series(validation, "#ea580c", true);
}

function renderChart(data) {
  document.getElementById("chart-job").textContent = data ? "Loss: " + data.id + " " + data.name : "Loss";
  const summary = document.getElementById("chart-summary");
  if (!data) {
    summary.textContent = "";
  } else {
    const last = data.train.length > 0 ? data.train[data.train.length - 1] : null;
    summary.textContent = data.state + ", step " + data.steps_done + " of " + data.steps +
        (last && last[1] !== null ? ", loss " + last[1].toFixed(4) : "") +
        (data.stride > 1 ? " (every " + data.stride + "th step shown)" : "");
  }
  drawChart(data);
}

// The selected job's newest FP8 statistics record (README "Watching FP8"),
// worst tensors first; hidden for a job without one.
function renderNumerics(data) {
  const panel = document.getElementById("numerics-panel");
  const numerics = data ? data.numerics : null;
  panel.hidden = !numerics;
  if (!numerics) return;
  document.getElementById("numerics-summary").textContent =
      "step " + numerics.step + ", worst " + numerics.tensors.length + " of " + numerics.count + " tensors";
  const body = document.getElementById("numerics");
  body.replaceChildren();
  for (const t of numerics.tensors) {
    const row = document.createElement("tr");
    cell(row, t.name);
    cell(row, t.format);
    cell(row, formatNumber(t.amax, 4), "num");
    cell(row, formatNumber(t.scale, 2), "num");
    cell(row, formatNumber(100 * t.saturated, 3) + "%", "num");
    cell(row, formatNumber(100 * t.underflow, 3) + "%", "num");
    body.appendChild(row);
  }
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

let timer = null;
async function refresh() {
  clearTimeout(timer);
  try {
    const status = await getJson("/api/jobs");
    selectedJob = chooseJob(status.jobs);
    renderJobs(status.jobs);
    renderWorkers(status.workers);
    lastSteps = selectedJob ? await getJson("/api/jobs/" + encodeURIComponent(selectedJob) + "/steps") : null;
    renderChart(lastSteps);
    renderNumerics(lastSteps);
    document.getElementById("updated").textContent =
        "updated " + new Date(status.time_unix_ms).toLocaleTimeString();
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "cannot reach the coordinator (" + e.message + ")";
  }
  timer = setTimeout(refresh, POLL_MS);
}

window.addEventListener("resize", () => drawChart(lastSteps));
window.addEventListener("hashchange", () => {
  selectedJob = decodeURIComponent(location.hash.replace(/^#/, ""));
  refresh();
});
refresh();

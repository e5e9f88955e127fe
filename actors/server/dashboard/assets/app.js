// The pollux dashboard: renders the data the page was served with, then
// polls its own server (a follower answers too) and re-renders. Every
// value from the cluster goes into the page as text (textContent), never
// as markup: job names are the users'.
"use strict";

(function () {
  const initial = JSON.parse(document.getElementById("initial").textContent);
  const view = document.body.dataset.view;
  const jobID = document.body.dataset.job;
  const main = document.getElementById("main");
  const POLL_MS = 1000;
  const JOB_POLL_MS = 2000;

  let ov = initial.Overview;
  let job = initial.Job;
  let series = (ov.series || []).slice();
  let lastOK = Date.now();
  let failing = null; // why the last poll failed
  let jobGone = false; // the job page's job is not on the cluster (any more)
  let refused = null; // the server refused the token: polling stops

  // el builds an element: el("td", {class: "x"}, "text", child, ...).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "style") e.style.cssText = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids) {
      if (k === undefined || k === null || k === false) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }

  function fmt(v, digits) {
    if (v === undefined || v === null || v === 0) return "–";
    if (typeof v !== "number") return String(v);
    if (Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0)) return v.toExponential(2);
    return v.toFixed(digits === undefined ? 2 : digits);
  }

  // colour is a job's colour, the same on every page and server: jobs in
  // submission order (the order every server lists them in) take the
  // colours of a palette in turn, so jobs submitted near each other
  // differ; a job not in the list gets one by its name's hash.
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7",
    "#9c755f", "#1f77b4", "#bcbd22", "#d62728", "#17becf", "#8c564b", "#2ca02c", "#9467bd"];
  function colour(id) {
    const i = ov.jobs.findIndex(j => j.id === id);
    if (i >= 0) return PALETTE[i % PALETTE.length];
    let h = 2166136261; // FNV-1a
    for (let k = 0; k < id.length; k++) h = Math.imul(h ^ id.charCodeAt(k), 16777619) >>> 0;
    return PALETTE[h % PALETTE.length];
  }

  function jobLink(id) {
    return el("a", {href: "/ui/jobs/" + encodeURIComponent(id)}, id);
  }

  function swatch(id) {
    return el("span", {class: "swatch", style: "background:" + colour(id)});
  }

  function setText(id, text) {
    const e = document.getElementById(id);
    if (e) e.textContent = text;
  }

  // ---- header and banner -------------------------------------------------

  function renderHeader() {
    setText("serving", ov.serving);
    setText("leader", ov.leader || "none");
    setText("term", ov.term);
    setText("generation", ov.generation);
    setText("viewer", ov.viewer.name + " (" + ov.viewer.role + ")");
    setText("updated", "updated " + new Date(ov.now * 1000).toLocaleTimeString());
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("current", a.dataset.nav === view || (view === "job" && a.dataset.nav === "jobs"));
    }
    const b = document.getElementById("banner");
    let msg = "", cls = "banner";
    if (refused) {
      msg = "Signed out: " + refused + " — sign in again with a valid token (/ui/login).";
      cls += " bad";
    } else if (failing) {
      msg = "Cannot reach " + ov.serving + " since " + new Date(lastOK).toLocaleTimeString() +
        " (" + failing + "): what you see is from then, not current.";
      cls += " bad";
    } else if (jobGone) {
      msg = "Job " + jobID + " is not on this cluster (any more): it may have been pruned after it finished.";
      cls += " bad";
    } else if (ov.health !== "ok") {
      msg = (ov.health === "no-quorum" ? "NO QUORUM — " : "STALE — ") + ov.health_reason;
      cls += " bad";
    }
    b.textContent = msg;
    b.className = cls;
    b.hidden = msg === "";
    b.dataset.health = failing ? "unreachable" : ov.health;
    // Data that may be behind is drawn faded, never as current.
    main.classList.toggle("stale", msg !== "");
  }

  // ---- cluster view --------------------------------------------------------

  function card(label, value, id) {
    return el("div", {class: "card"}, el("div", {class: "card-value", id: id}, value), el("div", {class: "card-label"}, label));
  }

  function running(jobs) {
    return jobs.filter(j => j.active && j.gpus > 0);
  }

  function renderCluster() {
    const c = ov.jobs_by_state || {};
    const cards = el("div", {class: "cards"},
      card("GPUs in use", ov.gpus_used + " / " + ov.gpus, "gpus-used"),
      card("jobs running", (c.running || 0) + (c.rescaling || 0), "jobs-running"),
      card("jobs pending", c.pending || 0, "jobs-pending"),
      card("goodput (samples/s)", fmt(ov.goodput, 0), "goodput"));
    const grid = el("div", {class: "grid", id: "grid"});
    for (const rack of ov.racks) {
      const r = el("section", {class: "rack", "data-rack": rack.name}, el("h3", {}, "rack " + rack.name));
      for (const n of rack.nodes) {
        const dead = n.health !== "alive";
        const gpus = el("div", {class: "gpus"});
        n.slots.forEach((j, i) => {
          const cell = el("div", {class: "gpu" + (j ? " busy" : ""), title: "GPU " + i + (j ? ": " + j : ": free"), "data-gpu-job": j || null});
          if (j) cell.style.background = colour(j);
          gpus.append(cell);
        });
        r.append(el("div", {class: "node" + (dead ? " dead" : ""), "data-node": n.id, "data-health": n.health},
          el("div", {class: "node-head"}, el("b", {}, n.id), " ", el("span", {class: "muted"}, (n.gpu_type || "") + " " + n.gpus_used + "/" + n.gpus),
            dead ? el("span", {class: "dead-label"}, n.health.toUpperCase()) : null),
          gpus));
      }
      grid.append(r);
    }
    const rows = running(ov.jobs).map(j => el("tr", {"data-job": j.id, "data-gpus": j.gpus},
      el("td", {}, swatch(j.id), " ", jobLink(j.id)), el("td", {}, j.state), el("td", {class: "num"}, j.gpus),
      el("td", {class: "num"}, j.nodes), el("td", {class: "num"}, j.batch_size || "–"), el("td", {class: "num"}, fmt(j.speedup))));
    const legend = el("table", {class: "table", id: "running-jobs"},
      el("thead", {}, el("tr", {}, ...["running job", "state", "GPUs", "nodes", "batch", "speedup"].map(h => el("th", {}, h)))),
      el("tbody", {}, ...rows));
    main.replaceChildren(cards, el("h2", {}, "Racks, nodes and GPUs"), grid,
      el("h2", {}, "Jobs holding GPUs (" + rows.length + ")"), legend);
  }

  // ---- jobs view -----------------------------------------------------------

  const jobCols = ["job", "state", "GPUs", "nodes", "batch", "local", "accum", "gain", "goodput", "speedup", "restarts", "epoch", "submitter", ""];

  function canCancel(j) {
    return j.active && (ov.viewer.cancel_any || (ov.viewer.cancel_own && ov.viewer.accessor && j.submitter_accessor === ov.viewer.accessor));
  }

  async function cancelJob(id, button) {
    if (!confirm("Cancel job " + id + "?")) return;
    button.disabled = true;
    try {
      const r = await fetch("/ui/api/jobs/" + encodeURIComponent(id) + "/cancel",
        {method: "POST", credentials: "same-origin", headers: {"X-Pollux-UI": "1"}});
      const body = await r.json().catch(() => ({}));
      if (!r.ok) alert("Cancel refused (" + r.status + "): " + (body.error || ""));
    } catch (e) {
      alert("Cancel failed: " + e);
    }
    poll();
  }

  function jobRow(j) {
    return el("tr", {"data-job": j.id, "data-gpus": j.gpus, "data-state": j.state},
      el("td", {}, swatch(j.id), " ", jobLink(j.id)), el("td", {}, j.state, j.reason ? el("span", {class: "muted", title: j.reason}, " ⓘ") : null),
      el("td", {class: "num"}, j.gpus), el("td", {class: "num"}, j.nodes),
      el("td", {class: "num"}, j.batch_size || "–"), el("td", {class: "num"}, j.local_bsz || "–"), el("td", {class: "num"}, j.gpus ? j.accum_steps : "–"),
      el("td", {class: "num"}, fmt(j.gain)), el("td", {class: "num"}, fmt(j.goodput, 1)), el("td", {class: "num"}, fmt(j.speedup)),
      el("td", {class: "num"}, j.restarts), el("td", {class: "num"}, j.epoch), el("td", {}, j.submitter || "–"),
      el("td", {}, canCancel(j) ? el("button", {class: "cancel", onclick: e => cancelJob(j.id, e.target)}, "cancel") : null));
  }

  function jobsTable(id, jobs) {
    return el("table", {class: "table", id: id},
      el("thead", {}, el("tr", {}, ...jobCols.map(h => el("th", {}, h)))),
      el("tbody", {}, ...jobs.map(jobRow)));
  }

  function renderJobs() {
    const act = ov.jobs.filter(j => j.active), done = ov.jobs.filter(j => !j.active);
    main.replaceChildren(
      el("h2", {}, "Active jobs (" + act.length + ")"), jobsTable("jobs-active", act),
      el("p", {class: "muted"}, "batch = GPUs × local batch × (accumulation + 1), the configuration the job's bid runs on its placement; " +
        "goodput in samples/s at the initial batch's statistical efficiency; speedup over the best on one GPU."),
      el("h2", {}, "Finished jobs (" + done.length + ")"), jobsTable("jobs-finished", done));
  }

  // ---- charts --------------------------------------------------------------

  const charts = {};

  function chart(key, holder, opts, data) {
    const width = Math.max(320, Math.min((holder.clientWidth || 900) - 14, 1400));
    opts.width = width;
    opts.height = opts.height || 260;
    if (charts[key] && charts[key].root.isConnected && charts[key].series.length === opts.series.length) {
      charts[key].setData(data);
      return charts[key];
    }
    if (charts[key]) charts[key].destroy();
    holder.replaceChildren();
    charts[key] = new uPlot(opts, data, holder);
    return charts[key];
  }

  // Charts follow the window's width.
  window.addEventListener("resize", () => {
    for (const c of Object.values(charts)) {
      const holder = c.root.parentElement;
      if (holder) c.setSize({width: Math.max(320, Math.min(holder.clientWidth - 14, 1400)), height: c.height});
    }
  });

  function timeSeriesChart(key, holder, title, names, cols, colours) {
    const data = [series.map(s => s.t)];
    for (const c of cols) data.push(series.map(c));
    chart(key, holder, {title: title, series: [{}].concat(names.map((n, i) => ({label: n, stroke: colours[i], width: 2}))),
      scales: {x: {time: true, range: timeRange}}, axes: [{}, {size: 60}]}, data);
  }

  // timeRange keeps a time axis of one point (or none) a few minutes wide.
  function timeRange(u, lo, hi) {
    if (lo === null || hi === null) return [ov.now - 300, ov.now];
    return hi - lo < 60 ? [lo - 150, hi + 150] : [lo, hi];
  }

  // ---- history view --------------------------------------------------------

  function renderHistory() {
    if (!document.getElementById("chart-gpus")) {
      main.replaceChildren(
        el("p", {class: "muted", id: "history-note"}),
        el("div", {class: "chart", id: "chart-gpus"}), el("div", {class: "chart", id: "chart-jobs"}), el("div", {class: "chart", id: "chart-goodput"}));
    }
    setText("history-note", series.length + " samples, one every " + ov.sample_every_seconds + " s, kept by " + ov.serving +
      " since it started (a server keeps " + "the last hours in memory; another server keeps its own).");
    timeSeriesChart("gpus", document.getElementById("chart-gpus"), "GPUs", ["in use", "of alive nodes"], [s => s.gpus_used, s => s.gpus], ["#1f77b4", "#aaa"]);
    timeSeriesChart("jobs", document.getElementById("chart-jobs"), "Jobs", ["running", "pending"], [s => s.running, s => s.pending], ["#2ca02c", "#ff7f0e"]);
    timeSeriesChart("goodput", document.getElementById("chart-goodput"), "Cluster goodput (samples/s, sum over running jobs)", ["goodput"], [s => s.goodput], ["#9467bd"]);
  }

  // ---- control-plane view --------------------------------------------------

  function kv(rows) {
    return el("table", {class: "kv"}, el("tbody", {}, ...rows.map(([k, v, id]) => el("tr", {}, el("th", {}, k), el("td", {id: id}, v)))));
  }

  function renderControl() {
    const lr = ov.last_round;
    const lc = ov.last_contact_seconds;
    main.replaceChildren(
      el("h2", {}, "Raft"),
      kv([["leader", ov.leader || "none known", "cp-leader"], ["term", ov.term, "cp-term"], ["allocation generation", ov.generation, "cp-generation"],
        ["this server", ov.serving + (ov.is_leader ? " (leader)" : " (follower)"), "cp-serving"],
        ["state", ov.health === "ok" ? (ov.is_leader ? "current (linearizable read)" : "follower copy, current") : ov.health_reason, "cp-health"],
        ["last heard from the leader", lc === undefined ? "–" : lc.toFixed(1) + " s ago", "cp-contact"]]),
      el("h2", {}, "Servers"),
      el("table", {class: "table", id: "peers"},
        el("thead", {}, el("tr", {}, ...["server", "rack", "role", "voter", "alive", ""].map(h => el("th", {}, h)))),
        el("tbody", {}, ...ov.peers.map(p => el("tr", {"data-peer": p.id, class: p.alive ? "" : "dead"},
          el("td", {}, el("b", {}, p.id)), el("td", {}, p.rack || "–"), el("td", {}, p.leader ? "leader" : "follower"),
          el("td", {}, p.voter ? "yes" : "no"), el("td", {}, p.alive ? "yes" : "NO"), el("td", {class: "muted"}, p.serving ? "serving this page" : ""))))),
      el("h2", {}, "Last allocation round on " + ov.serving),
      lr ? kv([["generation", lr.generation], ["duration", (lr.seconds * 1000).toFixed(1) + " ms", "cp-round"], ["jobs", lr.jobs],
        ["fitness", fmt(lr.fitness, 3)], ["policy", lr.policy || "–"]])
        : el("p", {class: "muted", id: "cp-round"}, "This server has run no round: rounds run on the leader (" + (ov.leader || "none") + ")."),
      ...autoscaleSection(ov.autoscale));
  }

  // The autoscaler's machines and bill (absent: the cluster never autoscaled).
  function autoscaleSection(as) {
    if (!as) return [];
    const bill = as.node_hours.toFixed(2) + " node-hours" + (as.cost === undefined ? "" : ", cost " + as.cost.toFixed(2));
    return [
      el("h2", {}, "Autoscaler"),
      kv([["desired nodes", as.desired, "cp-desired"], ["machines asked for", as.machines_asked], ["paid for so far", bill, "cp-bill"]]),
      el("table", {class: "table", id: "machines"},
        el("thead", {}, el("tr", {}, ...["machine", "phase", "since", "asked for"].map(h => el("th", {}, h)))),
        el("tbody", {}, ...as.machines.map(m => el("tr", {"data-machine": m.name},
          el("td", {}, el("b", {}, m.name)), el("td", {}, m.phase),
          el("td", {}, new Date(m.since * 1000).toLocaleTimeString()), el("td", {}, new Date(m.asked * 1000).toLocaleTimeString())))))];
  }

  // ---- job view ------------------------------------------------------------

  function renderJob() {
    if (!job) return;
    const j = job;
    if (!document.getElementById("job-summary")) {
      main.replaceChildren(
        el("h2", {}, swatch(j.id), " job ", el("span", {id: "job-id"}, j.id)),
        el("div", {id: "job-summary"}), el("div", {id: "job-actions"}),
        el("h2", {}, "Timeline"), el("div", {id: "job-timeline"}),
        el("h2", {}, "Log (rank 0, live)"), el("p", {class: "muted", id: "log-status"}, "connecting…"), el("pre", {class: "log", id: "log-lines"}),
        el("h2", {}, "Throughput model"), el("div", {id: "job-model"}),
        el("div", {class: "chart", id: "chart-fit"}), el("div", {class: "chart", id: "chart-speedup"}),
        el("h2", {}, "Gradient noise"), el("div", {id: "job-grad"}), el("div", {class: "chart", id: "chart-grad"}),
        el("h2", {}, "Measured configurations"), el("div", {id: "job-profile"}),
        el("h2", {}, "Batch configurations the job's bid runs"), el("div", {id: "job-choices"}));
    }
    startStreams();
    renderTimeline();
    document.getElementById("job-summary").replaceChildren(kv([
      ["state", j.state + (j.reason ? " — " + j.reason : ""), "job-state"], ["application", j.application || "–"],
      ["GPUs / nodes", j.gpus + " / " + j.nodes, "job-gpus"],
      ["placement", (j.placement || []).map(p => p.node + "×" + p.gpus + " (" + p.rack + ")").join(", ") || "–"],
      ["batch (local × accumulation)", j.batch_size ? j.batch_size + " (" + j.local_bsz + " × " + (j.accum_steps + 1) + ")" : "–"],
      ["gain", fmt(j.gain)], ["goodput (samples/s)", fmt(j.goodput, 1)], ["speedup over one GPU", fmt(j.speedup)],
      ["restarts / incarnation", j.restarts + " / " + j.incarnation], ["epoch", j.epoch], ["submitter", j.submitter || "–"]]));
    document.getElementById("job-actions").replaceChildren(canCancel(j) ?
      el("button", {class: "cancel", onclick: e => cancelJob(j.id, e.target)}, "cancel job") : "");
    const m = j.model;
    document.getElementById("job-model").replaceChildren(m ? kv([
      ["α_c, β_c (compute, s and s/sample)", fmt(m.alpha_c, 4) + ", " + fmt(m.beta_c, 5)],
      ["α_r, β_r (sync within a node, s and s per replica beyond 2)", fmt(m.alpha_r, 4) + ", " + fmt(m.beta_r, 5)],
      ["α_n, β_n (sync across nodes, s and s per replica beyond 2)", fmt(m.alpha_n, 4) + ", " + fmt(m.beta_n, 5)],
      ["γ (overlap)", fmt(m.gamma, 3)],
      ["limits", "init batch " + j.limits.init_batch_size + ", max batch " + j.limits.max_batch_size + ", local " +
        j.limits.min_local_bsz + "–" + j.limits.max_local_bsz + (j.limits.accumulation ? ", accumulation" : "")]])
      : el("p", {class: "muted"}, "No model fitted yet: the job's actor fits one from its workers' first measurements."));
    // Measured throughput (points) against the fitted curve (lines), one
    // colour per (GPU type, nodes, replicas) shape, each curve by its
    // type's model.
    const key = f => (f.gpu_type || "") + "/" + f.nodes + "/" + f.replicas;
    const shapeLabel = s => {
      const [t, n, k] = s.split("/");
      return (t ? t + ", " : "") + n + " node(s), " + k + " GPUs";
    };
    const shapes = [];
    for (const f of j.fit) shapes.push(key(f));
    for (const p of j.profile) if (!shapes.includes(key(p))) shapes.push(key(p));
    const xs = [...new Set(j.fit.flatMap(f => f.points.map(p => p[0])).concat(j.profile.map(p => p.local_bsz)))].sort((a, b) => a - b);
    const data = [xs], ser = [{label: "local batch"}];
    const palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
    shapes.forEach((s, i) => {
      const c = palette[i % palette.length];
      const f = j.fit.find(f => key(f) === s);
      if (f) {
        const at = new Map(f.points.map(p => [p[0], p[1]]));
        data.push(xs.map(x => at.has(x) ? at.get(x) : null));
        ser.push({label: "fit " + shapeLabel(s), stroke: c, width: 1.5, spanGaps: true, points: {show: false}});
      }
      const at = new Map(j.profile.filter(p => key(p) === s).map(p => [p.local_bsz, p.throughput]));
      data.push(xs.map(x => at.has(x) ? at.get(x) : null));
      ser.push({label: "measured " + shapeLabel(s), stroke: c, paths: () => null, points: {show: true, size: 8, fill: c}});
    });
    if (j.profile.length > 0) {
      chart("fit", document.getElementById("chart-fit"), {title: "Throughput: measured (points) and fitted (lines)",
        series: ser, scales: {x: {time: false, distr: 3, range: (u, lo, hi) => [lo, hi]}}, axes: [{label: "local batch"}, {label: "samples/s", size: 60}]}, data);
    } else {
      document.getElementById("chart-fit").replaceChildren(el("p", {class: "muted"}, "No measurements yet."));
    }
    // The bid's speedup curve; with per-type models, one line per GPU type
    // and shape (each over one GPU of its type; the legend gives that
    // one-GPU goodput, which compares the types).
    const ts = j.type_speedups || [];
    if (ts.length > 0) {
      const ks = [...new Set(ts.flatMap(t => t.points.map(p => p.replicas)))].sort((a, b) => a - b);
      const sdata = [ks], sser = [{label: "GPUs"}];
      ts.forEach((t, i) => {
        const c = palette[i % palette.length];
        const at = new Map(t.points.map(p => [p.replicas, p]));
        const lbl = t.gpu_type + " (one GPU " + fmt(t.one_gpu_goodput, 1) + " samples/s)";
        sdata.push(ks.map(k => (at.get(k) || {}).single_node || null));
        sser.push({label: lbl + ", one node", stroke: c, width: 2, spanGaps: true});
        sdata.push(ks.map(k => (at.get(k) || {}).multi_node || null));
        sser.push({label: lbl + ", several nodes", stroke: c, width: 2, dash: [6, 4], spanGaps: true});
      });
      chart("speedup", document.getElementById("chart-speedup"), {title: "Goodput speedup over one GPU of each type (the job's bid)",
        series: sser, scales: {x: {time: false}}, axes: [{label: "GPUs"}, {label: "speedup", size: 50}]}, sdata);
    } else if (j.speedups.length > 0) {
      chart("speedup", document.getElementById("chart-speedup"), {title: "Goodput speedup over one GPU (the job's bid)",
        series: [{label: "GPUs"}, {label: "one node", stroke: "#1f77b4", width: 2}, {label: "several nodes", stroke: "#d62728", width: 2, dash: [6, 4]}],
        scales: {x: {time: false}}, axes: [{label: "GPUs"}, {label: "speedup", size: 50}]},
        [j.speedups.map(p => p.replicas), j.speedups.map(p => p.single_node || null), j.speedups.map(p => p.multi_node || null)]);
    } else {
      document.getElementById("chart-speedup").replaceChildren();
    }
    const g = j.grad;
    document.getElementById("job-grad").replaceChildren(g ? kv([["|g|² (gradient's squared norm)", fmt(g.grad_sqr, 4)],
      ["σ² (variance)", fmt(g.grad_var, 4)], ["noise scale M0·σ²/|g|² (samples)", fmt(g.noise_scale, 1), "job-noise"]])
      : el("p", {class: "muted"}, "No gradient statistics reported yet."));
    // The history holds the changes this server saw; the latest value
    // still holds now.
    const hist = j.grad_history.slice();
    if (g && hist.length > 0 && g.t > hist[hist.length - 1].t) hist.push(g);
    if (hist.length > 0) {
      chart("grad", document.getElementById("chart-grad"), {title: "Gradient noise scale over time (the changes " + ov.serving + " saw)",
        series: [{}, {label: "noise scale", stroke: "#9467bd", width: 2, paths: uPlot.paths.stepped({align: 1})}],
        scales: {x: {time: true, range: timeRange}}, axes: [{}, {size: 60}]},
        [hist.map(p => p.t), hist.map(p => p.noise_scale)]);
    } else {
      document.getElementById("chart-grad").replaceChildren();
    }
    // The GPU type column only when some measurement has a type.
    const typed = j.profile.some(p => p.gpu_type);
    document.getElementById("job-profile").replaceChildren(el("table", {class: "table"},
      el("thead", {}, el("tr", {}, ...(typed ? ["GPU type"] : []).concat(["nodes", "GPUs", "local batch", "step s", "accum step s", "samples/s", "fitted", "reports"]).map(h => el("th", {}, h)))),
      el("tbody", {}, ...j.profile.map(p => el("tr", {}, ...(typed ? [el("td", {}, p.gpu_type || "–")] : []), el("td", {class: "num"}, p.nodes), el("td", {class: "num"}, p.replicas),
        el("td", {class: "num"}, p.local_bsz), el("td", {class: "num"}, fmt(p.step_time, 4)), el("td", {class: "num"}, fmt(p.accum_time, 4)),
        el("td", {class: "num"}, fmt(p.throughput, 1)), el("td", {class: "num"}, fmt(p.fitted, 1)), el("td", {class: "num"}, p.count))))));
    // Per GPU count: local batch × (accumulation + 1) and gain, on one
    // node and over several.
    const single = j.single_node || [], multi = j.multi_node || [];
    const choice = c => c ? c.local_bsz + " × " + (c.accum_steps + 1) + ", gain " + fmt(c.gain) : "–";
    const rows = [];
    for (let k = 1; k <= Math.max(single.length, multi.length); k++) {
      rows.push(el("tr", {}, el("td", {class: "num"}, k), el("td", {}, choice(single[k - 1])), el("td", {}, k > 1 ? choice(multi[k - 1]) : "–")));
    }
    document.getElementById("job-choices").replaceChildren(rows.length ? el("table", {class: "table"},
      el("thead", {}, el("tr", {}, ...["GPUs", "one node", "several nodes"].map(h => el("th", {}, h)))), el("tbody", {}, ...rows))
      : el("p", {class: "muted"}, "No bid yet."));
  }

  // ---- job view: timeline and log -------------------------------------------

  // The job's events (GET /ui/api/jobs/ID/events: the API's server-sent
  // events of the job, which end when the job has finished and every
  // event of it is sent) and its rank 0 worker log (GET
  // /ui/api/jobs/ID/logs?follow=true: the newest incarnation's, then the
  // next ones as they start, one JSON object a line).
  const events = [];
  let streaming = false;
  const LOG_KEEP = 500;

  function startStreams() {
    if (streaming || view !== "job") return;
    streaming = true;
    followEvents();
    followLog();
  }

  function jobActive() {
    return !jobGone && (!job || job.active);
  }

  function followEvents() {
    const es = new EventSource("/ui/api/jobs/" + encodeURIComponent(jobID) + "/events");
    const add = m => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      if (events.length && ev.seq <= events[events.length - 1].seq) return;
      events.push(ev);
      renderTimeline();
    };
    for (const t of initial.EventTypes || []) es.addEventListener(t, add);
    es.onmessage = add;
    // The stream ends once the job has finished: the browser would
    // reconnect (resuming by Last-Event-ID) for ever; a finished job's
    // page stops it. A refused or unknown job closes it for good.
    es.onerror = () => {
      if (!jobActive()) es.close();
    };
  }

  const EVENT_COLOURS = {submitted: "#6b7280", placed: "#2ca02c", resized: "#1f77b4", restarted: "#ff7f0e", preempted: "#d62728",
    completed: "#17becf", failed: "#b42318", cancelled: "#8c564b", checkpointed: "#9467bd"};

  function renderTimeline() {
    const holder = document.getElementById("job-timeline");
    if (!holder) return;
    if (events.length === 0) {
      holder.replaceChildren(el("p", {class: "muted", id: "timeline-empty"}, "No events of this job yet."));
      return;
    }
    const t0 = events[0].time, t1 = Math.max(ov.now || 0, events[events.length - 1].time);
    const span = Math.max(t1 - t0, 1);
    const strip = el("div", {class: "timeline", id: "timeline-strip"});
    for (const ev of events) {
      const left = (100 * (ev.time - t0) / span).toFixed(2);
      strip.append(el("span", {class: "tick", title: ev.type + " at " + new Date(ev.time * 1000).toLocaleTimeString() + ": " + ev.reason,
        style: "left:" + left + "%;background:" + (EVENT_COLOURS[ev.type] || "#555")}));
    }
    const rows = events.slice().reverse().map(ev => el("tr", {"data-event-type": ev.type, "data-seq": ev.seq},
      el("td", {class: "num"}, ev.seq), el("td", {}, new Date(ev.time * 1000).toLocaleTimeString()),
      el("td", {}, el("span", {class: "swatch", style: "background:" + (EVENT_COLOURS[ev.type] || "#555")}), " ", ev.type),
      el("td", {class: "reason"}, ev.reason)));
    holder.replaceChildren(strip, el("div", {class: "muted timeline-axis"},
      el("span", {}, new Date(t0 * 1000).toLocaleTimeString()), el("span", {}, new Date(t1 * 1000).toLocaleTimeString())),
      el("table", {class: "table", id: "job-events"},
        el("thead", {}, el("tr", {}, ...["#", "time", "event", "why"].map(h => el("th", {}, h)))), el("tbody", {}, ...rows)));
  }

  async function followLog() {
    const status = msg => setText("log-status", msg);
    const pre = document.getElementById("log-lines");
    let incarnation = 0;
    let r;
    try {
      r = await fetch("/ui/api/jobs/" + encodeURIComponent(jobID) + "/logs?follow=true&tail=200", {credentials: "same-origin", cache: "no-store"});
    } catch (e) {
      status("Cannot reach " + ov.serving + " for the log; trying again.");
      return setTimeout(followLog, 3000);
    }
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      if (r.status === 403) {
        status("Your token may not read this job's log: only its submitter or an admin does (" + (body.error || r.status) + ").");
        return;
      }
      status("No log to show (" + r.status + "): " + (body.error || r.statusText) + (jobActive() ? "; trying again." : ""));
      if (jobActive() && r.status !== 401) setTimeout(followLog, 3000);
      return;
    }
    pre.replaceChildren();
    status("following the newest incarnation's log");
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    const show = l => {
      if (l.error) {
        status("The log ended: " + l.error);
        return;
      }
      if (l.incarnation !== incarnation) {
        incarnation = l.incarnation;
        pre.append(el("div", {class: "log-mark"}, "— incarnation " + l.incarnation + (l.node ? " on " + l.node : "") + " —"));
        status("following incarnation " + l.incarnation + (l.node ? " (node " + l.node + ")" : ""));
      }
      if (l.skipped_bytes) pre.append(el("div", {class: "log-mark"}, "… " + l.skipped_bytes + " bytes rotated away …"));
      pre.append(el("div", {class: "log-line", "data-incarnation": l.incarnation}, l.line));
    };
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += dec.decode(value, {stream: true});
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line) {
            try { show(JSON.parse(line)); } catch (e) { /* not a log object */ }
          }
        }
        while (pre.childElementCount > LOG_KEEP) pre.firstElementChild.remove();
        pre.scrollTop = pre.scrollHeight;
      }
    } catch (e) {
      status("The log's stream broke (" + e + ")" + (jobActive() ? "; reconnecting." : "."));
    }
    if (jobActive()) {
      setTimeout(followLog, 2000);
    } else if (incarnation === 0) {
      status("The job has finished; its worker wrote nothing that is kept.");
    } else {
      status("The job has finished; the log of incarnation " + incarnation + " ends here.");
    }
  }

  // ---- polling -------------------------------------------------------------

  function render() {
    renderHeader();
    switch (view) {
      case "cluster": renderCluster(); break;
      case "jobs": renderJobs(); break;
      case "history": renderHistory(); break;
      case "control": renderControl(); break;
      case "job": renderJob(); break;
    }
  }

  async function getJSON(url) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 4000);
    let r;
    try {
      r = await fetch(url, {credentials: "same-origin", cache: "no-store", signal: ctl.signal});
    } catch (e) {
      throw new Error(e.name === "AbortError" ? "no answer within 4 s" : "connection failed");
    } finally {
      clearTimeout(timer);
    }
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      const e = new Error((body.error || r.statusText) + " (" + r.status + ")");
      e.status = r.status;
      throw e;
    }
    return body;
  }

  async function poll() {
    const since = series.length ? series[series.length - 1].t : 0;
    try {
      const next = await getJSON("/ui/api/overview?since=" + since);
      for (const s of next.series) series.push(s);
      const keep = 6 * 3600 / Math.max(next.sample_every_seconds, 1);
      if (series.length > keep) series.splice(0, series.length - keep);
      ov = next;
      failing = null;
      lastOK = Date.now();
      if (view === "job" && (!job || Date.now() - (job._at || 0) >= JOB_POLL_MS)) {
        try {
          job = await getJSON("/ui/api/jobs/" + encodeURIComponent(jobID));
          job._at = Date.now();
          jobGone = false;
        } catch (e) {
          if (e.status !== 404) throw e;
          jobGone = true;
        }
      }
    } catch (e) {
      if (e.status === 401 || e.status === 403) refused = e.message;
      else failing = e.message || String(e);
    }
    render();
  }

  async function loop() {
    await poll();
    if (!refused) setTimeout(loop, POLL_MS);
  }

  render();
  setTimeout(loop, POLL_MS);
})();

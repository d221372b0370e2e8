// The explorer page: maps computed by oodcalc (embedded, plain fine-tuning), a point run by
// OOD.run (dynamics.js) with or without interventions, charts and the numbers `oodcalc
// predict` prints. No network, no library.
"use strict";

(function () {
  const DATA = JSON.parse(document.getElementById("oodcalc-data").textContent);
  const $ = (id) => document.getElementById(id);

  // --- embedded arrays ------------------------------------------------------------------
  function bytes(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }
  const f32 = (b64) => new Float32Array(bytes(b64).buffer);

  const VERDICTS = DATA.codes.verdict;        // code -> name
  const DIRECTIONS = DATA.codes.direction;
  const VERDICT_COLORS = DATA.colors.verdict;  // name -> colour
  const DIRECTION_COLORS = DATA.colors.direction;
  const CLASS_COLORS = DATA.colors.classes;
  const RULES = DATA.k3.rules;                 // paper, corrected, D_sign, first_step
  const RULE_LABELS = DATA.k3.labels;
  const PROMISE = { "forgetting": 1, "backward-transfer": -1, "unaffected": 0,
                    "rising": 1, "falling": -1, "flat": 0 };

  const k2 = { n: DATA.k2.n, F: f32(DATA.k2.F), F_1: f32(DATA.k2.F_1), F_2: f32(DATA.k2.F_2),
               regime_1: bytes(DATA.k2.regime_1), regime_2: bytes(DATA.k2.regime_2) };
  const k3 = DATA.k3.slices.map((s) => {
    const out = { gamma1: s.gamma1, n: DATA.k3.n, F_1: f32(s.F_1), F_sign: bytes(s.F_sign),
                  scored: bytes(s.scored), fractions: s.fractions,
                  counterexamples: s.counterexamples };
    for (const r of RULES) out[r] = bytes(s[r]);
    // which rules contradict the exact sign of F_1 (bit i: RULES[i])
    const N = out.n * out.n, bits = new Uint8Array(N);
    for (let i = 0; i < N; i++) {
      if (!out.scored[i]) { bits[i] = 255; continue; }
      const sign = out.F_sign[i] - 1;
      let b = 0;
      RULES.forEach((r, j) => {
        const name = (r === "paper" || r === "corrected" ? VERDICTS : DIRECTIONS)[out[r][i]];
        const p = PROMISE[name];
        if (p !== undefined && p !== sign) b |= 1 << j;
      });
      bits[i] = b;
    }
    out.bits = bits;
    return out;
  });

  // the overlap map: rows ρ, columns γ2 (γ1 = 1); rules that contradict the exact sign of
  // F_k per point (bit 0: the paper's rule, bit 1: the sign of C_k; 255: not scored)
  const OV = DATA.overlap;
  const ov = { rho: OV.rho, gamma2: OV.gamma2, nx: OV.gamma2.length, ny: OV.rho.length,
               scored: bytes(OV.scored), counterexamples: OV.counterexamples,
               fractions: OV.fractions };
  for (const k of [1, 2]) {
    for (const key of ["F_sign", "paper", "C_sign"]) ov[`${key}_${k}`] = bytes(OV[`${key}_${k}`]);
    ov[`F_${k}`] = f32(OV[`F_${k}`]);
    const bits = new Uint8Array(ov.nx * ov.ny);
    for (let i = 0; i < bits.length; i++) {
      if (!ov.scored[i]) { bits[i] = 255; continue; }
      const sign = ov[`F_sign_${k}`][i] - 1;
      const p = PROMISE[VERDICTS[ov[`paper_${k}`][i]]], c = PROMISE[DIRECTIONS[ov[`C_sign_${k}`][i]]];
      bits[i] = (p !== undefined && p !== sign ? 1 : 0) | (c !== undefined && c !== sign ? 2 : 0);
    }
    ov[`classes_${k}`] = bits;
  }
  const OV_SHORT = ["the paper's rule", "the sign of C_k"];

  // --- state and the URL fragment -------------------------------------------------------
  const state = { gamma: [1, -0.9], eps: DATA.protocol.eps, eta: DATA.protocol.eta,
                  eta_ft: null, map: "k2", layer: "F", slice: 0, view: "source",
                  rho: "",             // the overlap ⟨v1, v2⟩ as typed ("": 0, orthonormal)
                  // interventions as typed (OOD.checkInterventions reads and checks them);
                  // weights: "none", a rule, or "list" with the numbers in `list`
                  iv: { replay: "", l2: "", project: "none", weights: "none", list: "" } };
  const WEIGHT_MODES = ["none", "cosine", "drop-negative"];

  // The interventions for OOD.run: an empty list is an error there (it names the field),
  // not plain fine-tuning.
  function interventionSpec() {
    const iv = state.iv;
    const weights = iv.weights === "list" ? (iv.list.trim() === "" ? [] : iv.list) : iv.weights;
    return { replay: iv.replay.trim(), l2: iv.l2.trim(), project: iv.project, weights };
  }

  function describeInterventions(iv) {
    const parts = [];
    if (iv.replay) parts.push(`replay λ = ${iv.replay}`);
    if (iv.l2) parts.push(`L2 μ = ${iv.l2}`);
    if (iv.project !== "none") parts.push(`projection off span(V): ${iv.project === "both" ? "both sides" : iv.project + " side"}`);
    if (iv.weights !== null) parts.push(`query weights ${Array.isArray(iv.weights) ? "c = (" + iv.weights.join(", ") + ")" : iv.weights}`);
    return parts.join(", ");
  }

  function parseFragment() {
    const h = decodeURIComponent(location.hash.replace(/^#/, ""));
    const out = {};
    for (const part of h.split("&")) {
      const i = part.indexOf("=");
      if (i > 0) out[part.slice(0, i)] = part.slice(i + 1);
    }
    return out;
  }

  function readGamma(text) {
    const parts = String(text).split(",").map((p) => p.trim());
    if (parts.length < 2) return { error: "give at least two values, e.g. 1,-0.9" };
    if (parts.length > 64) return { error: "at most 64 features in the page (oodcalc predict takes more)" };
    const g = [];
    for (const p of parts) {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(p)) return { error: `entry '${p}' is not a number` };
      const x = Number(p);
      if (!(Math.abs(x) <= 1)) return { error: `entry '${p}' is outside [-1, 1]` };
      g.push(x);
    }
    return { gamma: g };
  }

  function readPositive(text) {
    if (!/^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/.test(String(text))) return null;
    const x = Number(text);
    return Number.isFinite(x) && x > 0 ? x : null;
  }

  function applyFragment() {
    const f = parseFragment();
    const messages = [];
    if (f.gamma !== undefined) {
      const g = readGamma(f.gamma);
      if (g.error) messages.push("gamma: " + g.error); else state.gamma = g.gamma;
    }
    for (const key of ["eps", "eta", "eta_ft"]) {
      if (f[key] === undefined) { if (key === "eta_ft") state.eta_ft = null; continue; }
      const x = readPositive(f[key]);
      if (x === null) messages.push(`${key}: got '${f[key]}'; expected a number > 0`);
      else state[key] = x;
    }
    state.rho = f.rho === undefined ? "" : f.rho;
    for (const key of ["replay", "l2"]) state.iv[key] = f[key] === undefined ? "" : f[key];
    state.iv.project = f.project === undefined ? "none" : f.project;
    const w = f.weights === undefined ? "none" : f.weights;
    if (WEIGHT_MODES.includes(w)) { state.iv.weights = w; state.iv.list = ""; }
    else { state.iv.weights = "list"; state.iv.list = w; }
    $("fragment-error").textContent = messages.join("; ");
    return f;
  }

  function writeFragment() {
    let h = `gamma=${state.gamma.map(String).join(",")}&eps=${state.eps}&eta=${state.eta}`;
    if (state.eta_ft !== null) h += `&eta_ft=${state.eta_ft}`;
    if (state.rho.trim()) h += `&rho=${state.rho.trim()}`;
    const iv = state.iv;
    if (iv.replay.trim()) h += `&replay=${iv.replay.trim()}`;
    if (iv.l2.trim()) h += `&l2=${iv.l2.trim()}`;
    if (iv.project !== "none") h += `&project=${iv.project}`;
    if (iv.weights !== "none") h += `&weights=${iv.weights === "list" ? iv.list.replace(/\s+/g, "") : iv.weights}`;
    try { history.replaceState(null, "", "#" + h); } catch (e) { location.hash = h; }
  }

  function command() {
    const g = state.gamma.map(String).join(",");
    let c = "oodcalc predict ";
    const overlap = OOD.checkOverlap(state.rho.trim(), state.gamma.length);
    if (!overlap.error && overlap.rho !== 0)          // only what the page accepted
      c += (overlap.rho < 0 ? `--overlap=${overlap.rho} ` : `--overlap ${overlap.rho} `);
    c += (g.startsWith("-") ? `--gamma=${g}` : `--gamma ${g}`);
    c += ` --eps ${state.eps} --eta ${state.eta}`;
    if (state.eta_ft !== null) c += ` --eta-ft ${state.eta_ft}`;
    const iv = OOD.checkInterventions(interventionSpec(), state.gamma.length).interventions;
    if (iv) {                      // only what the page accepted (a bad field exports nothing)
      if (iv.replay) c += ` --replay ${iv.replay}`;
      if (iv.l2) c += ` --l2 ${iv.l2}`;
      if (iv.project !== "none") c += ` --project ${iv.project}`;
      if (iv.weights !== null) c += ` --weights ${Array.isArray(iv.weights) ? iv.weights.join(",") : iv.weights}`;
    }
    return c;
  }

  // --- colours --------------------------------------------------------------------------
  function hex(c) { return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)); }
  const RDBU = ["#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7", "#fddbc7", "#f4a582",
                "#d6604d", "#b2182b"].map(hex);
  function diverging(v) {            // v in [-1, 1]
    const x = (Math.max(-1, Math.min(1, v)) + 1) / 2 * (RDBU.length - 1);
    const i = Math.min(RDBU.length - 2, Math.floor(x)), f = x - i;
    return RDBU[i].map((c, j) => Math.round(c + f * (RDBU[i + 1][j] - c)));
  }

  // --- the map --------------------------------------------------------------------------
  const MAP = { pad: { l: 46, r: 10, t: 10, b: 40 }, size: 420 };

  function layerOptions() {
    if (state.map === "k2")
      return [["F", "F (total forgetting)"], ["F_1", "F_1"], ["F_2", "F_2"],
              ["regime_1", "paper's verdict, feature 1"], ["regime_2", "paper's verdict, feature 2"]];
    if (state.map === "overlap")
      return [["classes_2", "feature 2: where the rules contradict sign F_2"],
              ["F_sign_2", "feature 2: exact sign of F_2"], ["paper_2", "feature 2: paper's rule"],
              ["C_sign_2", "feature 2: sign of C_2 (first order, with overlap)"],
              ["F_2", "feature 2: F_2 (value)"],
              ["classes_1", "feature 1: where the rules contradict sign F_1"],
              ["F_sign_1", "feature 1: exact sign of F_1"], ["F_1", "feature 1: F_1 (value)"]];
    return [["paper", RULE_LABELS.paper], ["corrected", RULE_LABELS.corrected],
            ["D_sign", RULE_LABELS.D_sign], ["first_step", RULE_LABELS.first_step],
            ["F_sign", "exact sign of F_1"], ["F_1", "F_1 (value)"],
            ["classes", "where the rules contradict sign F_1"]];
  }

  function mapPixels() {
    if (state.map === "overlap") return overlapPixels();
    const s = state.map === "k2" ? null : k3[state.slice];
    const n = s ? s.n : k2.n, N = n * n, rgba = new Uint8ClampedArray(4 * N);
    const legend = [];
    let values = null, codes = null, names = null, colors = null;
    if (state.map === "k2") {
      if (state.layer.startsWith("regime")) { codes = k2[state.layer]; names = VERDICTS; colors = VERDICT_COLORS; }
      else values = k2[state.layer];
    } else if (state.layer === "paper" || state.layer === "corrected") {
      codes = s[state.layer]; names = VERDICTS; colors = VERDICT_COLORS;
    } else if (state.layer === "D_sign" || state.layer === "first_step") {
      codes = s[state.layer]; names = DIRECTIONS; colors = DIRECTION_COLORS;
    } else if (state.layer === "F_sign") {
      codes = s.F_sign; names = DIRECTIONS; colors = DIRECTION_COLORS;
    } else if (state.layer === "F_1") values = s.F_1;
    if (values) {
      // each sign saturates at its own extreme (as plot phase-diagram): F > 0 is ten times
      // smaller than F < 0 at the defaults, and one scale left forgetting a faint pink
      let low = 0, high = 0;
      for (let i = 0; i < N; i++) { low = Math.min(low, values[i]); high = Math.max(high, values[i]); }
      for (let i = 0; i < N; i++) {
        const v = values[i];
        const c = diverging(v > 0 ? v / high : v < 0 ? -v / low : 0);
        rgba.set([c[0], c[1], c[2], 255], 4 * i);
      }
      legend.push({ gradient: true, low, high });
    } else if (codes) {
      const count = new Map();
      for (let i = 0; i < N; i++) {
        const name = names[codes[i]];
        const c = hex(colors[name]);
        rgba.set([c[0], c[1], c[2], 255], 4 * i);
        count.set(name, (count.get(name) || 0) + 1);
      }
      for (const [name, c] of Object.entries(colors))
        if (count.get(name)) legend.push({ color: c, label: `${name} (${(100 * count.get(name) / N).toFixed(1)} %)` });
    } else {                                 // disagreement classes
      const count = new Map();
      for (let i = 0; i < N; i++) {
        const b = s.bits[i];
        const c = b === 255 ? [255, 255, 255] : hex(CLASS_COLORS[b]);
        rgba.set([c[0], c[1], c[2], 255], 4 * i);
        count.set(b, (count.get(b) || 0) + 1);
      }
      for (const b of [...count.keys()].sort((x, y) => x - y)) {
        const label = b === 255 ? "not scored (no fine-tuning step, T2 = 0)" : b === 0
          ? "no rule contradicts the sign of F_1"
          : "contradicted by: " + RULES.filter((_, j) => b >> j & 1).map((r) => DATA.k3.short[r]).join(", ");
        legend.push({ color: b === 255 ? "#ffffff" : CLASS_COLORS[b], label: `${label} (${(100 * count.get(b) / N).toFixed(2)} %)` });
      }
    }
    return { nx: n, ny: n, rgba, legend, x: [-1, 1], y: [-1, 1] };
  }

  function overlapPixels() {
    const N = ov.nx * ov.ny, rgba = new Uint8ClampedArray(4 * N), legend = [];
    const layer = state.layer, k = Number(layer.slice(-1));
    const count = new Map();
    const paint = (i, color, label) => {
      const c = hex(color);
      rgba.set([c[0], c[1], c[2], 255], 4 * i);
      if (!count.has(label)) count.set(label, { color, n: 0 });
      count.get(label).n += 1;
    };
    if (layer.startsWith("F_") && !layer.startsWith("F_sign")) {
      const values = ov[layer];
      let low = 0, high = 0;
      for (let i = 0; i < N; i++) { low = Math.min(low, values[i]); high = Math.max(high, values[i]); }
      for (let i = 0; i < N; i++) {
        const v = values[i], c = diverging(v > 0 ? v / high : v < 0 ? -v / low : 0);
        rgba.set([c[0], c[1], c[2], 255], 4 * i);
      }
      legend.push({ gradient: true, low, high });
    } else {
      for (let i = 0; i < N; i++) {
        if (layer.startsWith("classes")) {
          const b = ov[layer][i];
          if (b === 255) { paint(i, "#ffffff", "not scored (no fine-tuning step, T2 = 0)"); continue; }
          const wrong = OV_SHORT.filter((_, j) => b >> j & 1).map((x) => x.replace("C_k", `C_${k}`));
          paint(i, CLASS_COLORS[b], b === 0 ? `both rules agree with the sign of F_${k}`
                : `contradicted by ${wrong.join(" and ")}`);
        } else if (layer.startsWith("paper")) {
          const name = VERDICTS[ov[layer][i]];
          paint(i, VERDICT_COLORS[name], name);
        } else {
          const name = DIRECTIONS[ov[layer][i]];
          paint(i, DIRECTION_COLORS[name], name + (layer.startsWith("F_sign") ? ` (F_${k} ${name === "rising" ? "> 0" : name === "falling" ? "< 0" : "= 0"})` : ""));
        }
      }
      for (const [label, { color, n }] of count) legend.push({ color, label: `${label} (${(100 * n / N).toFixed(1)} %)` });
    }
    return { nx: ov.nx, ny: ov.ny, rgba, legend, x: [ov.gamma2[0], ov.gamma2[ov.nx - 1]],
             y: [ov.rho[0], ov.rho[ov.ny - 1]] };
  }

  function drawMap() {
    const canvas = $("map"), ctx = setupCanvas(canvas);
    const W = canvas.clientWidth, H = canvas.clientHeight, p = MAP.pad;
    const side = Math.min(W - p.l - p.r, H - p.t - p.b);
    MAP.box = { x: p.l, y: p.t, side };
    ctx.clearRect(0, 0, W, H);
    const { nx, ny, rgba, legend, x: xr, y: yr } = mapPixels();
    MAP.x = xr; MAP.y = yr;
    const off = document.createElement("canvas");
    off.width = nx; off.height = ny;
    const octx = off.getContext("2d"), img = octx.createImageData(nx, ny);
    // row 0 of the data is the bottom of the picture (y = −1, or the lowest ρ)
    for (let r = 0; r < ny; r++) img.data.set(rgba.subarray(4 * r * nx, 4 * (r + 1) * nx), 4 * (ny - 1 - r) * nx);
    octx.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, p.l, p.t, side, side);
    ctx.strokeStyle = "#333"; ctx.lineWidth = 1;
    ctx.strokeRect(p.l + 0.5, p.t + 0.5, side, side);
    const X = (g) => p.l + (g - xr[0]) / (xr[1] - xr[0]) * side;
    const Y = (g) => p.t + (1 - (g - yr[0]) / (yr[1] - yr[0])) * side;
    ctx.fillStyle = "#222"; ctx.font = "12px sans-serif"; ctx.textAlign = "center";
    for (const v of [-1, -0.5, 0, 0.5, 1]) ctx.fillText(String(v), X(v), p.t + side + 15);
    ctx.textAlign = "right";
    const yTicks = state.map === "overlap" ? [-0.8, -0.4, 0, 0.4, 0.8].filter((v) => v >= yr[0] - 1e-9 && v <= yr[1] + 1e-9)
      : [-1, -0.5, 0, 0.5, 1];
    for (const v of yTicks) ctx.fillText(String(v), p.l - 5, Y(v) + 4);
    ctx.textAlign = "center";
    const [xl, yl] = state.map === "k2" ? ["γ2", "γ1"] : state.map === "overlap"
      ? ["γ2 = ⟨v2, u2⟩ (γ1 = 1)", "ρ = ⟨v1, v2⟩"] : ["γ2", "γ3"];
    ctx.fillText(xl, p.l + side / 2, p.t + side + 32);
    ctx.save(); ctx.translate(14, p.t + side / 2); ctx.rotate(-Math.PI / 2); ctx.fillText(yl, 0, 0); ctx.restore();
    // guides: the axes, and for K = 2 the theorem's line γ1 + γ2 = 0
    ctx.strokeStyle = "rgba(0,0,0,0.35)"; ctx.setLineDash([4, 3]);
    line(ctx, X(xr[0]), Y(0), X(xr[1]), Y(0)); line(ctx, X(0), Y(yr[0]), X(0), Y(yr[1]));
    if (state.map === "k2") line(ctx, X(-1), Y(1), X(1), Y(-1));
    ctx.setLineDash([]);
    if (state.map === "overlap") {
      // the paper's K = 2 boundaries for feature 2 (γ2 = 0 and γ2 = −1), the same at every ρ
      ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.setLineDash([7, 4]);
      line(ctx, X(0), Y(yr[0]), X(0), Y(yr[1]));
      ctx.setLineDash([]); ctx.lineWidth = 1;
      for (const c of ov.counterexamples) star(ctx, X(c[1]), Y(c[0]), 9, "#ffeb3b");
    }
    if (state.map === "k3") {
      for (const c of k3[state.slice].counterexamples) star(ctx, X(c[1]), Y(c[2]), 9, "#ffeb3b");
    }
    // the current point, when it lies on this map
    const g = state.gamma;
    let pt = null;
    if (state.map === "k2" && g.length === 2) pt = [g[1], g[0]];
    if (state.map === "k3" && g.length === 3 && g[0] === k3[state.slice].gamma1) pt = [g[1], g[2]];
    if (state.map === "overlap" && g.length === 2 && g[0] === 1) {
      const o = OOD.checkOverlap(state.rho.trim(), 2);
      if (!o.error && o.rho >= yr[0] && o.rho <= yr[1]) pt = [g[1], o.rho];
    }
    if (pt) {
      ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
      ctx.beginPath(); ctx.arc(X(pt[0]), Y(pt[1]), 6, 0, 2 * Math.PI); ctx.stroke();
      ctx.strokeStyle = "#fff"; ctx.lineWidth = 1;
      ctx.beginPath(); ctx.arc(X(pt[0]), Y(pt[1]), 7.5, 0, 2 * Math.PI); ctx.stroke();
    }
    drawLegend(legend);
    drawFractions();
  }

  function star(ctx, x, y, r, fill) {
    ctx.beginPath();
    for (let i = 0; i < 10; i++) {
      const a = -Math.PI / 2 + i * Math.PI / 5, rr = i % 2 ? r * 0.45 : r;
      ctx.lineTo(x + rr * Math.cos(a), y + rr * Math.sin(a));
    }
    ctx.closePath(); ctx.fillStyle = fill; ctx.fill();
    ctx.strokeStyle = "#000"; ctx.lineWidth = 1.2; ctx.stroke();
  }

  function line(ctx, x0, y0, x1, y1) { ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke(); }

  function drawLegend(items) {
    const el = $("legend");
    el.textContent = "";
    for (const it of items) {
      const row = document.createElement("span");
      row.className = "legend-item";
      const sw = document.createElement("span");
      sw.className = "swatch";
      if (it.gradient) {
        sw.style.background = "linear-gradient(90deg, #2166ac, #f7f7f7, #b2182b)";
        sw.style.width = "60px";
        const end = (v) => (v ? v.toPrecision(3) : "0");
        row.append(sw, ` ${end(it.low)} … 0 … +${end(it.high)} (blue: backward transfer, red: ` +
                   "forgetting; each colour saturates at its own extreme)");
      } else {
        sw.style.background = it.color;
        row.append(sw, " " + it.label);
      }
      el.append(row);
    }
    if (state.map === "overlap") {
      const row = document.createElement("span");
      row.className = "legend-item";
      row.textContent = "★ (ρ, γ2) = " + ov.counterexamples.map((x) => `(${x.join(", ")})`).join(", ") +
        ": the paper's rule is wrong for feature 2 (forgotten at the first, backward transfer at the second); " +
        "thick dashes: its boundary γ2 = 0 (the other, γ2 = −1, is the left edge)";
      el.append(row);
    }
    if (state.map === "k3") {
      const c = k3[state.slice].counterexamples;
      if (c.length) {
        const row = document.createElement("span");
        row.className = "legend-item";
        row.textContent = "★ claim 8b's counterexample" + (c.length > 1 ? "s " : " ") + c.map((x) => `(${x.join(", ")})`).join(", ");
        el.append(row);
      }
    }
  }

  function drawFractions() {
    const el = $("fractions");
    el.textContent = "";
    if (state.map === "overlap") { drawOverlapFractions(el); return; }
    if (state.map !== "k3") { el.hidden = true; return; }
    el.hidden = false;
    const s = k3[state.slice];
    const t = document.createElement("table");
    t.innerHTML = `<caption>Area fractions on the slice γ1 = ${s.gamma1} (${s.n}×${s.n} points), against the exact sign of F_1</caption>` +
      "<tr><th>rule</th><th>agrees</th><th>disagrees</th><th>undecided</th><th>not scored</th></tr>";
    for (const r of RULES) {
      const f = s.fractions[r], tr = document.createElement("tr");
      for (const v of [RULE_LABELS[r], f.agrees, f.disagrees, f.undecided, f.not_scored]) {
        const td = document.createElement("td");
        td.textContent = typeof v === "number" ? (100 * v).toFixed(2) + " %" : v;
        tr.append(td);
      }
      t.append(tr);
    }
    el.append(t);
  }

  function drawOverlapFractions(el) {
    el.hidden = false;
    const t = document.createElement("table");
    t.innerHTML = `<caption>Points (${ov.ny} ρ × ${ov.nx} γ2) where a rule contradicts the exact sign of F_k</caption>` +
      "<tr><th>feature</th><th>paper's rule</th><th>sign of C_k</th></tr>";
    for (const k of [2, 1]) {
      const f = ov.fractions[String(k)], tr = document.createElement("tr");
      for (const v of [String(k), f.paper, f.C_sign]) {
        const td = document.createElement("td");
        td.textContent = typeof v === "number" ? (100 * v).toFixed(2) + " %" : v;
        tr.append(td);
      }
      t.append(tr);
    }
    el.append(t);
  }

  function mapPoint(ev) {
    const rect = $("map").getBoundingClientRect(), b = MAP.box;
    const x = (ev.clientX - rect.left - b.x) / b.side, y = (ev.clientY - rect.top - b.y) / b.side;
    if (x < 0 || x > 1 || y < 0 || y > 1) return null;
    const round = (v) => Math.round(v * 1000) / 1000;
    const [x0, x1] = MAP.x || [-1, 1], [y0, y1] = MAP.y || [-1, 1];
    return [round(x0 + x * (x1 - x0)), round(y1 - y * (y1 - y0))];
  }

  function hover(ev) {
    const p = mapPoint(ev);
    if (!p) { $("hover").textContent = ""; return; }
    const plain = $("map-plain").hidden ? "" : " (plain fine-tuning)";
    if (state.map === "overlap") {
      const i = nearest(ov.gamma2, p[0]), j = nearest(ov.rho, p[1]), at = j * ov.nx + i;
      const say = (k) => `F_${k} = ${ov[`F_${k}`][at].toPrecision(4)} (paper ${VERDICTS[ov[`paper_${k}`][at]]}, C_${k} ${DIRECTIONS[ov[`C_sign_${k}`][at]]})`;
      $("hover").textContent = `ρ = ${ov.rho[j]}, γ = (1, ${ov.gamma2[i]}): ${say(2)}, ${say(1)}${plain}`;
      return;
    }
    const s = state.map === "k2" ? null : k3[state.slice];
    const n = s ? s.n : k2.n;
    const i = Math.round((p[0] + 1) / 2 * (n - 1)), j = Math.round((p[1] + 1) / 2 * (n - 1));
    const at = j * n + i;
    if (!s) {
      $("hover").textContent = `γ = (${p[1]}, ${p[0]}): F = ${k2.F[at].toPrecision(4)}, F_1 = ${k2.F_1[at].toPrecision(4)} ` +
        `(${VERDICTS[k2.regime_1[at]]}), F_2 = ${k2.F_2[at].toPrecision(4)} (${VERDICTS[k2.regime_2[at]]})${plain}`;
    } else {
      $("hover").textContent = `γ = (${s.gamma1}, ${p[0]}, ${p[1]}): F_1 = ${s.F_1[at].toPrecision(4)}; paper ${VERDICTS[s.paper[at]]}, ` +
        `corrected ${VERDICTS[s.corrected[at]]}, D_1 ${DIRECTIONS[s.D_sign[at]]}, first step ${DIRECTIONS[s.first_step[at]]}${plain}`;
    }
  }

  function nearest(axis, v) {
    let best = 0;
    for (let i = 1; i < axis.length; i++) if (Math.abs(axis[i] - v) < Math.abs(axis[best] - v)) best = i;
    return best;
  }

  function pick(ev) {
    const p = mapPoint(ev);
    if (!p) return;
    if (state.map === "overlap") {       // the grid's point: the page's run is that point of the map
      state.gamma = [1, ov.gamma2[nearest(ov.gamma2, p[0])]];
      state.rho = String(ov.rho[nearest(ov.rho, p[1])]);
      $("gamma").value = state.gamma.join(",");
      schedule();
      return;
    }
    state.rho = "";                      // the K = 2 and K = 3 maps are of orthonormal features
    state.gamma = state.map === "k2" ? [p[1], p[0]] : [k3[state.slice].gamma1, p[0], p[1]];
    $("gamma").value = state.gamma.join(",");
    schedule();
  }

  // --- charts ---------------------------------------------------------------------------
  function setupCanvas(canvas) {
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.clientWidth, H = canvas.clientHeight;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }

  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22", "#17becf"];

  function niceTicks(lo, hi, count) {
    const span = hi - lo || 1, step0 = span / count;
    const mag = 10 ** Math.floor(Math.log10(step0));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-12 * span; v += step) out.push(v);
    return out;
  }

  function chart(canvas, series, opts) {
    const ctx = setupCanvas(canvas), W = canvas.clientWidth, H = canvas.clientHeight;
    const p = { l: 62, r: 12, t: 22, b: 34 };
    ctx.clearRect(0, 0, W, H);
    let xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
    const ty = opts.logY ? (v) => Math.log10(v) : (v) => v;
    for (const s of series) for (let i = 0; i < s.x.length; i++) {
      const y = s.y[i];
      if (opts.logY && !(y > 0)) continue;
      xmin = Math.min(xmin, s.x[i]); xmax = Math.max(xmax, s.x[i]);
      ymin = Math.min(ymin, ty(y)); ymax = Math.max(ymax, ty(y));
    }
    if (!Number.isFinite(xmin)) return;
    if (xmax === xmin) xmax = xmin + 1;
    if (ymax === ymin) { ymax += 0.5; ymin -= 0.5; }
    const padY = 0.04 * (ymax - ymin); ymin -= padY; ymax += padY;
    const X = (x) => p.l + (x - xmin) / (xmax - xmin) * (W - p.l - p.r);
    const Y = (y) => p.t + (1 - (y - ymin) / (ymax - ymin)) * (H - p.t - p.b);
    ctx.font = "11px sans-serif"; ctx.fillStyle = "#333"; ctx.strokeStyle = "#ddd"; ctx.lineWidth = 1;
    ctx.textAlign = "right";
    const yt = opts.logY ? niceTicks(Math.floor(ymin), Math.ceil(ymax), 6).filter((v) => Number.isInteger(v) && v >= ymin && v <= ymax)
      : niceTicks(ymin, ymax, 5);
    for (const v of yt) {
      line(ctx, p.l, Y(v), W - p.r, Y(v));
      ctx.fillText(opts.logY ? `1e${v}` : fmt(v, 3), p.l - 4, Y(v) + 4);
    }
    ctx.textAlign = "center";
    for (const v of niceTicks(xmin, xmax, 6)) ctx.fillText(String(Math.round(v)), X(v), H - p.b + 14);
    ctx.fillText(opts.xlabel, p.l + (W - p.l - p.r) / 2, H - 4);
    ctx.save(); ctx.translate(12, p.t + (H - p.t - p.b) / 2); ctx.rotate(-Math.PI / 2);
    ctx.fillText(opts.ylabel, 0, 0); ctx.restore();
    ctx.strokeStyle = "#888"; ctx.strokeRect(p.l, p.t, W - p.l - p.r, H - p.t - p.b);
    for (const v of opts.vlines || []) {
      ctx.strokeStyle = "#000"; ctx.setLineDash([]); line(ctx, X(v.x), p.t, X(v.x), H - p.b);
      ctx.textAlign = "left"; ctx.fillText(v.label, X(v.x) + 3, p.t - 6);
    }
    for (const h of opts.hlines || []) {
      if (opts.logY && !(h.y > 0)) continue;
      const y = ty(h.y);
      if (y < ymin || y > ymax) continue;
      ctx.strokeStyle = "#999"; ctx.setLineDash([2, 3]); line(ctx, p.l, Y(y), W - p.r, Y(y));
      ctx.setLineDash([]); ctx.textAlign = "right"; ctx.fillText(h.label, W - p.r - 3, Y(y) - 3);
    }
    for (const s of series) {
      ctx.strokeStyle = s.color; ctx.lineWidth = s.width || 1.5; ctx.setLineDash(s.dash || []);
      ctx.beginPath();
      let on = false;
      for (let i = 0; i < s.x.length; i++) {
        const y = s.y[i];
        if (opts.logY && !(y > 0)) { on = false; continue; }
        const px = X(s.x[i]), py = Y(ty(y));
        if (on) ctx.lineTo(px, py); else ctx.moveTo(px, py);
        on = true;
      }
      ctx.stroke();
    }
    ctx.setLineDash([]);
  }

  function legendHTML(el, items) {
    el.textContent = "";
    for (const it of items) {
      const row = document.createElement("span");
      row.className = "legend-item";
      const sw = document.createElement("span");
      sw.className = "line-swatch";
      sw.style.borderTop = `${it.width || 2}px ${it.dash ? "dashed" : "solid"} ${it.color}`;
      row.append(sw, " " + it.label);
      el.append(row);
    }
  }

  function drawCharts(res) {
    if (res && res.error) {         // no run: no charts of an earlier point
      for (const id of ["chart-errors", "chart-weights"]) {
        const canvas = $(id);
        setupCanvas(canvas).clearRect(0, 0, canvas.clientWidth, canvas.clientHeight);
      }
      for (const id of ["legend-errors", "legend-weights"]) $(id).textContent = "";
      return;
    }
    if (!res || !res.paths) return;
    const K = res.K, { pre, ft, z1, z0, gamma } = res.paths;
    const T1 = res.T1;
    const w = new Float64Array(K);
    const many = K > 6;
    // errors: source e_k (solid) and OOD e_k (dashed), pretraining then fine-tuning
    const series = [];
    const preX = pre.steps.map(Number), ftX = ft.steps.map((t) => T1 + t);
    const gram = res.paths.gram ? OOD.overlapGeometry(res.rho, gamma) : null;
    // overlap: the pretraining snapshots hold (z_V, e), the OOD errors read with G_U
    const preLogits = pre.items.map((it) => gram ? it[0] : OOD.rayLogits(K, it[0], it[1]));
    const preSrc = pre.items.map((it) => gram ? it[1] : new Float64Array(K).fill(it[2]));
    const preOod = preLogits.map((z) => gram
      ? OOD.gramErrorsAndGradient(OOD.gramOodStart(z, gram.G_V, gram.M), gram.G_U, new Float64Array(2), null)
      : OOD.columnErrors(OOD.oodStart(z, gamma, K), K, new Float64Array(K), w));
    for (let k = 0; k < K; k++) {
      const color = PALETTE[k % PALETTE.length];
      series.push({ x: preX.concat(ftX), y: preSrc.map((e) => e[k]).concat(ft.items.map((it) => it[2][k])), color, width: 1.8 });
      series.push({ x: preX.concat(ftX), y: preOod.map((e) => e[k]).concat(ft.items.map((it) => it[1][k])), color, dash: [5, 3], width: 1.2 });
    }
    chart($("chart-errors"), series, { logY: true, xlabel: "gradient step (pretraining on V, then fine-tuning on U)",
      ylabel: "e_k", vlines: [{ x: T1, label: "T1" }], hlines: [{ y: res.eps, label: "ε" }] });
    const items = [];
    for (let k = 0; k < Math.min(K, 10); k++) items.push({ color: PALETTE[k], label: `v${k + 1} (source)` });
    items.push({ color: "#555", dash: true, label: "u_k (OOD), dashed" });
    legendHTML($("legend-errors"), items);

    // weights: α (diagonal, solid) and β (off-diagonal, dashed), source or OOD view
    const view = state.view;
    const ws = [];
    const preZ = preLogits.map((z) => view === "source" ? z
      : gram ? OOD.gramOodStart(z, gram.G_V, gram.M) : OOD.oodStart(z, gamma, K));
    // with interventions the items carry z_V (claim 7's source view is plain fine-tuning's)
    const ftZ = ft.items.map((it) => view !== "source" ? it[0]
      : it[3] || OOD.sourceLogits(z1, gamma, z0, it[0], K, new Float64Array(K * K)));
    const all = preZ.concat(ftZ), xs = preX.concat(ftX);
    for (let k = 0; k < K; k++) {
      const color = PALETTE[k % PALETTE.length];
      ws.push({ x: xs, y: all.map((z) => z[k * K + k]), color, width: 2 });
      if (many) {         // K > 6: the mean β of each column, not K − 1 lines
        ws.push({ x: xs, y: all.map((z) => { let s = 0; for (let n = 0; n < K; n++) if (n !== k) s += z[k * K + n]; return s / (K - 1); }), color, dash: [5, 3], width: 1 });
      } else {
        for (let n = 0; n < K; n++) if (n !== k) ws.push({ x: xs, y: all.map((z) => z[k * K + n]), color, dash: [5, 3], width: 1 });
      }
    }
    chart($("chart-weights"), ws, { xlabel: "gradient step", ylabel: view === "source" ? "logit vᵀQv" : "logit uᵀQu",
      vlines: [{ x: T1, label: "T1" }], hlines: [{ y: res.alpha_star, label: "α*" }] });
    const wi = [];
    for (let k = 0; k < Math.min(K, 10); k++) wi.push({ color: PALETTE[k], label: `α_${k + 1}` });
    wi.push({ color: "#555", dash: true, label: many ? "mean β of column k (dashed)" : "β_{n,k}, n ≠ k (dashed)" });
    legendHTML($("legend-weights"), wi);
  }

  // --- numbers ----------------------------------------------------------------------------
  function fmt(x, digits) {
    if (typeof x !== "number") return String(x);
    if (x === 0) return "0";
    const a = Math.abs(x);
    if (a >= 1e-4 && a < 1e6) return String(Number(x.toPrecision(digits || 5)));
    return x.toExponential((digits || 5) - 1).replace(/\.?0+e/, "e");
  }
  const signed = (x, d) => (x > 0 ? "+" : "") + fmt(x, d);

  function cell(tr, text, key, value, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (key !== undefined && key !== null) { td.dataset.key = key; td.dataset.value = String(value); }
    if (cls) td.className = cls;
    tr.append(td);
    return td;
  }

  function showNumbers(res) {
    const sum = $("summary"), table = $("features");
    sum.textContent = ""; table.textContent = "";
    // a bad intervention is named once, beside its field
    $("run-error").textContent = res.error && res.error !== $("intervention-error").textContent ? res.error : "";
    $("run-note").hidden = !res.note;
    $("run-note").textContent = res.note ? res.note[0].toUpperCase() + res.note.slice(1) + "." : "";
    const K = res.K, iv = res.interventions || null;
    const plainOnly = "n/a: the closed forms are for plain fine-tuning";
    let Fsays = res.F > 0 ? " (net forgetting)" : res.F < 0 ? " (net backward transfer)" : "";
    if (iv && iv.project !== "none" && !iv.replay && res.F === 0)
      Fsays = " (exactly: the projected update never moves the source logits, Vᵀ(I − VVᵀ) = 0)";
    const rows = [
      ["T1 (pretraining steps)", res.T1, "T1"],
      ["α at T1 (closed form α*)", res.alpha === undefined ? "" : `${fmt(res.alpha)} (α* = ${fmt(res.alpha_star)})`, "alpha", res.alpha],
      ["β at T1", res.beta === undefined ? "" : fmt(res.beta), "beta", res.beta],
      ["OOD loss at T1", res.ood_loss === undefined ? "" : fmt(res.ood_loss), "ood_loss", res.ood_loss],
      ["step-size bound min exp(−β_u)", res.step_size_bound === undefined ? "" : res.step_size_bound === null ? plainOnly : fmt(res.step_size_bound), "step_size_bound", res.step_size_bound],
    ];
    if (iv) rows.push(["interventions (this point only)", describeInterventions(iv), "interventions", JSON.stringify(iv)]);
    if (res.rho) rows.push(["overlap ρ = ⟨v1, v2⟩", `${res.rho} (Gram dynamics: G_V, G_U, M = VᵀU)`, "rho", res.rho]);
    rows.push(
      ["T2 (fine-tuning steps)", res.T2, "T2"]);
    if (iv && res.reached !== undefined)
      rows.push(["rule on U: every covered e_k ≤ ε", res.reached ? "reached at T2" : res.blocked
        ? "not reached: blocked (every feature left above ε is frozen by the projection)"
        : "not reached: stalled (the pull balances the fit)", "reached", res.reached]);
    rows.push(
      ["F = L_tr(after) − L_tr(before)", res.F === undefined ? "" : signed(res.F) + Fsays, "F", res.F],
      ["time in this browser", `${res.ms.toFixed(1)} ms (${res.engine || ""})`, "ms", res.ms]);
    for (const [label, text, key, value] of rows) {
      const tr = document.createElement("tr");
      cell(tr, label);
      cell(tr, text === undefined ? "" : String(text), key, value === undefined ? text : value);
      sum.append(tr);
    }
    if (res.error) return;
    const head = document.createElement("tr");
    const heads = ["k", "γ_k", "paper's verdict (claim 8)", "corrected", "first step ΔL_{v_k} (exact)",
                   res.rho ? "C_k (first order, with overlap)" : "D_k", "F_k = ΔL_{v_k} (exact)", "L_{v_k} trend"];
    if (iv) heads.push("c_k (query weight)");
    for (const h of heads) {
      const th = document.createElement("th"); th.textContent = h; head.append(th);
    }
    table.append(head);
    for (let k = 0; k < K; k++) {
      const tr = document.createElement("tr");
      cell(tr, String(k + 1));
      cell(tr, String(res.gamma[k]), `gamma.${k + 1}`, res.gamma[k]);
      if (iv) {
        for (const key of ["regime", "corrected_regime"]) cell(tr, "n/a", `${key}.${k + 1}`, "null").title = plainOnly;
        cell(tr, `${res.initial_direction[k]} ${signed(res.first_step[k], 3)}`, `first_step.${k + 1}`, res.first_step[k], "dir " + res.initial_direction[k]);
        cell(tr, "n/a", `D_k.${k + 1}`, "null").title = plainOnly;
        cell(tr, signed(res.F_k[k]), `F_k.${k + 1}`, res.F_k[k], res.F_k[k] > 0 ? "dir rising" : res.F_k[k] < 0 ? "dir falling" : "dir flat");
        cell(tr, res.trend[k], `trend.${k + 1}`, res.trend[k]);
        cell(tr, fmt(res.weights[k]) + (res.covered[k] ? "" : " (not trained)") + (res.frozen[k] ? " (frozen)" : ""), `weight.${k + 1}`, res.weights[k]);
        table.append(tr);
        continue;
      }
      const v = cell(tr, res.regime[k], `regime.${k + 1}`, res.regime[k], "verdict " + res.regime[k]);
      v.title = res.condition[k];
      const small = document.createElement("div"); small.className = "condition"; small.textContent = res.condition[k]; v.append(small);
      const c = cell(tr, res.corrected_regime[k], `corrected_regime.${k + 1}`, res.corrected_regime[k], "verdict " + res.corrected_regime[k]);
      c.title = res.corrected_condition[k];
      cell(tr, `${res.initial_direction[k]} ${signed(res.first_step[k], 3)}`, `first_step.${k + 1}`, res.first_step[k], "dir " + res.initial_direction[k]);
      cell(tr, `${signed(res.D_k[k], 4)} ${res.D_k_agrees[k] ? "✓" : "✗"}`, `D_k.${k + 1}`, res.D_k[k], "dir " + res.D_k_direction[k]);
      cell(tr, signed(res.F_k[k]), `F_k.${k + 1}`, res.F_k[k], res.F_k[k] > 0 ? "dir rising" : res.F_k[k] < 0 ? "dir falling" : "dir flat");
      const tc = cell(tr, res.trend[k] + (res.theorem_holds[k] === false ? " ✗" : ""), `trend.${k + 1}`, res.trend[k]);
      if (res.theorem_holds[k] === false) tc.title = "the exact trajectory contradicts the paper's verdict";
      table.append(tr);
    }
    if (res.theorem_holds.includes(false)) {
      const tr = document.createElement("tr"), td = document.createElement("td");
      td.colSpan = 8; td.className = "condition";
      td.textContent = res.rho
        ? "✗ the exact trajectory contradicts the paper's verdict: its rule reads γ only, and overlapping training features (ρ ≠ 0) change the answer."
        : "✗ the exact trajectory contradicts the paper's verdict: for K > 2 its condition is not sufficient.";
      tr.append(td); table.append(tr);
    }
  }

  // --- running ----------------------------------------------------------------------------
  let pending = false, last = null;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; update(); });
  }

  function update() {
    const etaFt = state.eta_ft === null ? state.eta : state.eta_ft;
    syncControls();
    writeFragment();
    $("command").value = command();
    $("command-text").textContent = command();
    const asked = OOD.checkInterventions(interventionSpec(), state.gamma.length);
    $("intervention-error").textContent = asked.error || "";
    const banner = $("map-plain");
    banner.hidden = !asked.interventions;
    banner.textContent = asked.interventions ? "The maps show plain fine-tuning (no intervention). " +
      `The interventions set (${describeInterventions(asked.interventions)}) apply to the point's run only, on the right.` : "";
    last = OOD.run(state.gamma, state.eps, state.eta, etaFt, { interventions: interventionSpec(),
                                                              rho: state.rho.trim() });
    showNumbers(last);
    drawCharts(last);
    drawMap();
    $("page").dataset.ready = "1";
  }

  // sliders: log10 scale; the value shown (and used) has 2 significant digits
  const SLIDERS = { eps: [-3, -0.7], eta: [-2, 0.3], eta_ft: [-2, 0.3] };
  const nice = (x) => Number(x.toPrecision(2));
  function syncControls() {
    for (const key of ["eps", "eta", "eta_ft"]) {
      const v = key === "eta_ft" && state.eta_ft === null ? state.eta : state[key];
      $(`${key}-range`).value = String(Math.log10(v));
      if (document.activeElement !== $(`${key}-text`)) $(`${key}-text`).value = String(v);
    }
    $("eta_ft-same").checked = state.eta_ft === null;
    for (const key of ["replay", "l2"]) if (document.activeElement !== $(key)) $(key).value = state.iv[key];
    $("project").value = state.iv.project;
    $("weights").value = state.iv.weights;
    $("weights-list").hidden = state.iv.weights !== "list";
    if (document.activeElement !== $("weights-list")) $("weights-list").value = state.iv.list;
    if (document.activeElement !== $("gamma")) $("gamma").value = state.gamma.map(String).join(",");
    if (document.activeElement !== $("rho")) $("rho").value = state.rho;
    $("K").textContent = `K = ${state.gamma.length}`;
  }

  function setupControls() {
    for (const key of ["eps", "eta", "eta_ft"]) {
      const range = $(`${key}-range`), text = $(`${key}-text`);
      range.min = SLIDERS[key][0]; range.max = SLIDERS[key][1]; range.step = "0.01";
      range.addEventListener("input", () => { state[key] = nice(10 ** Number(range.value)); schedule(); });
      text.addEventListener("change", () => {
        const x = readPositive(text.value);
        if (x === null) { $("fragment-error").textContent = `${key}: got '${text.value}'; expected a number > 0`; return; }
        $("fragment-error").textContent = "";
        state[key] = x; schedule();
      });
    }
    $("eta_ft-same").addEventListener("change", (ev) => {
      state.eta_ft = ev.target.checked ? null : state.eta; schedule();
    });
    $("gamma").addEventListener("change", () => {
      const g = readGamma($("gamma").value);
      if (g.error) { $("fragment-error").textContent = "gamma: " + g.error; return; }
      $("fragment-error").textContent = "";
      state.gamma = g.gamma; schedule();
    });
    for (const key of ["replay", "l2"])
      $(key).addEventListener("change", () => { state.iv[key] = $(key).value; schedule(); });
    $("rho").addEventListener("change", () => { state.rho = $("rho").value; schedule(); });
    $("project").addEventListener("change", () => { state.iv.project = $("project").value; schedule(); });
    $("weights").addEventListener("change", () => { state.iv.weights = $("weights").value; schedule(); });
    $("weights-list").addEventListener("change", () => { state.iv.list = $("weights-list").value; schedule(); });
    $("copy-command").addEventListener("click", () => copy($("command").value));
    $("copy-link").addEventListener("click", () => copy(location.href));
    $("view").addEventListener("change", (ev) => { state.view = ev.target.value; drawCharts(last); });
    for (const r of document.querySelectorAll("input[name=map]"))
      r.addEventListener("change", () => { state.map = r.value; state.layer = layerOptions()[0][0]; fillLayers(); drawMap(); });
    $("layer").addEventListener("change", (ev) => { state.layer = ev.target.value; drawMap(); });
    $("slice").addEventListener("change", (ev) => { state.slice = Number(ev.target.value); drawMap(); });
    const slice = $("slice");
    k3.forEach((s, i) => { const o = document.createElement("option"); o.value = String(i); o.textContent = `γ1 = ${s.gamma1}`; slice.append(o); });
    const map = $("map");
    let dragging = false;
    map.addEventListener("mousedown", (ev) => { dragging = true; pick(ev); });
    window.addEventListener("mouseup", () => { dragging = false; });
    map.addEventListener("mousemove", (ev) => { hover(ev); if (dragging) pick(ev); });
    map.addEventListener("mouseleave", () => { $("hover").textContent = ""; });
    window.addEventListener("hashchange", () => { applyFragment(); schedule(); });
    window.addEventListener("resize", () => { drawMap(); drawCharts(last); });
    fillLayers();
  }

  function fillLayers() {
    const sel = $("layer");
    sel.textContent = "";
    for (const [v, label] of layerOptions()) {
      const o = document.createElement("option"); o.value = v; o.textContent = label; sel.append(o);
    }
    sel.value = state.layer;
    $("slice-box").hidden = state.map !== "k3";
  }

  function copy(text) {
    const done = () => { $("copied").textContent = "copied"; setTimeout(() => { $("copied").textContent = ""; }, 1200); };
    if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, () => fallback(text, done));
    else fallback(text, done);
  }
  function fallback(text, done) {
    const t = document.createElement("textarea"); t.value = text; document.body.append(t); t.select();
    try { document.execCommand("copy"); done(); } catch (e) { /* the text is in the box */ }
    t.remove();
  }

  // --- the test hook: #test=[[gamma, eps, eta, eta_ft, interventions, rho], ...] -----------
  // Runs every point as the page does (OOD.run) and writes the numbers as JSON into
  // <pre id="test-output">, for a browser test that reads the DOM (--dump-dom).
  function testHook(f) {
    let points;
    try { points = JSON.parse(f.test); } catch (e) { $("test-output").textContent = JSON.stringify({ error: String(e) }); return; }
    const out = points.map(([gamma, eps, eta, etaFt, interventions, rho]) => {
      const r = OOD.run(gamma, eps, eta, etaFt === undefined || etaFt === null ? eta : etaFt,
                        { record: false, interventions, rho });
      delete r.paths;
      return r;
    });
    $("test-output").textContent = JSON.stringify(out);
  }

  function init() {
    setupControls();
    const f = applyFragment();
    if (f.map === "k3") { state.map = "k3"; state.layer = "classes"; fillLayers(); document.querySelector("input[value=k3]").checked = true; }
    if (f.map === "overlap") { state.map = "overlap"; state.layer = "classes_2"; fillLayers(); document.querySelector("input[value=overlap]").checked = true; }
    if (f.slice !== undefined) { state.slice = Math.max(0, Math.min(k3.length - 1, Number(f.slice) || 0)); $("slice").value = String(state.slice); }
    if (f.test !== undefined) testHook(f);
    update();
  }

  init();
})();

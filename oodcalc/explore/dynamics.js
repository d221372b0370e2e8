// The exact logit dynamics of oodcalc (oodcalc/finetune/dynamics.py, oodcalc/prediction.py,
// oodcalc/theory.py), ported to plain JavaScript for the explorer page.
//
// Same model, same conventions (L = Σ e_k / K, full-batch GD from Q = 0, both phases stop
// at the first step where every e_k <= ε), and the same floating-point operations in the
// same order as the Python code where they decide a result:
//   - pretraining: dynamics.ray_step_loop (the symmetric ray, one scalar recurrence);
//   - fine-tuning with every γ equal (M = cI): the same ray loop, with the source column;
//   - any other parallel shift: dynamics._Batch (the K×K descent: softmax down each column
//     with the max subtracted, e_k = ½ Σ_n r², the step x -= ((r − Σ a r) a) η/K);
//   - source logits Z1 + (γ_n (z − z0)) γ_k (claim 7), per-feature loss e_k / K;
//   - D_k, the paper's verdict and the corrected one as in theory.py;
//   - with interventions (replay, the L2 pull, projections, query weights): the terms engine
//     of finetune/terms.py and finetune/engine.py on both logits (z_U, z_V), with its
//     stopping rule on the covered features and its blocked and stalled outcomes.
//   - overlapping training features (K = 2, ⟨v_1, v_2⟩ = ρ, oodcalc predict --overlap): the
//     Gram dynamics of finetune/gram.py and predict._predict_gram (see runOverlap), plain
//     fine-tuning; their 2×2 products and solves in NumPy may use fused multiply-adds, so
//     there F_k agrees to ~1e-15 rather than to the bit.
// Only Math.exp may differ from the C library's exp in the last bit, so T1 and T2 come out
// identical and F_k agrees to rounding (the tests compare both with `oodcalc predict`).
"use strict";

const OOD = (function () {
  const TREND_TOL = 1e-15;     // report.TREND_TOL
  const ZERO_TOL = 1e-12;      // theory.ZERO_TOL
  const FLAT_RTOL = 1e-12;     // theory.FLAT_RTOL
  const SNAPSHOTS = 1200;      // points kept per phase for the charts

  // Every `stride`-th step, halving the kept points (and doubling the stride) whenever
  // more than `limit` are held, as predict._Snapshots does.
  class Snapshots {
    constructor(limit) { this.stride = 1; this.limit = limit; this.steps = []; this.items = []; }
    offer(t, make) {
      if (t % this.stride !== 0) return;
      this.steps.push(t);
      this.items.push(make());
      if (this.items.length > this.limit) {
        this.steps = this.steps.filter((_, i) => i % 2 === 0);
        this.items = this.items.filter((_, i) => i % 2 === 0);
        this.stride *= 2;
      }
    }
    close(t, make) {
      if (!this.steps.length || this.steps[this.steps.length - 1] !== t) {
        this.steps.push(t);
        this.items.push(make());
      }
    }
  }

  // e_k of every column of a K×K matrix z (column-major: z[k*K + n] = z[n, k]), as
  // model.conditional_errors: softmax down the column, max subtracted, ½ Σ_n r_n².
  function columnErrors(z, K, out, w) {
    for (let k = 0; k < K; k++) {
      const o = k * K;
      let mx = z[o];
      for (let n = 1; n < K; n++) if (z[o + n] > mx) mx = z[o + n];
      let s = 0;
      for (let n = 0; n < K; n++) { w[n] = Math.exp(z[o + n] - mx); s += w[n]; }
      let e = 0;
      for (let n = 0; n < K; n++) {
        const r = w[n] / s - (n === k ? 1.0 : 0.0);
        e += r * r;
      }
      out[k] = 0.5 * e;
    }
    return out;
  }

  // The symmetric ray (dynamics.ray_step_loop): own logit `own`, K−1 others `other`.
  // With `source` = [own, other, scale] the source column src + scale·(logits − start) is
  // followed: its loss e/K at the first and last step, and whether it rose or fell.
  function rayLoop(own, other, K, eta, eps, maxSteps, source, snaps, onStep) {
    const m = K - 1.0;
    const rate = eta / K;
    const own0 = own, other0 = other;
    const srcOwn = source ? source[0] : own, srcOther = source ? source[1] : other;
    const scale = source ? source[2] : 0.0;
    let prev = 0.0, first = 0.0, rises = false, falls = false, t = 0, e = 0.0;
    for (;;) {
      const top = own >= other ? own : other;
      const wo = Math.exp(own - top);
      const wb = Math.exp(other - top);
      const total = wo + m * wb;
      const p = wo / total;
      const q = wb / total;
      const r = p - 1.0;
      e = 0.5 * (r * r + m * q * q);
      if (source) {
        const so = srcOwn + scale * (own - own0);
        const sb = srcOther + scale * (other - other0);
        const stop = so >= sb ? so : sb;
        const sw = Math.exp(so - stop);
        const sv = Math.exp(sb - stop);
        const stotal = sw + m * sv;
        const sr = sw / stotal - 1.0;
        const sq = sv / stotal;
        const loss = 0.5 * (sr * sr + m * sq * sq) / K;
        if (t === 0) first = loss;
        else if (loss - prev > 1e-15) rises = true;
        else if (prev - loss > 1e-15) falls = true;
        prev = loss;
      }
      if (snaps) { const o = own, b = other, ee = e; snaps.offer(t, () => [o, b, ee]); }
      if (onStep) onStep(t);
      if (e <= eps || t >= maxSteps) break;
      const S = p * r + m * q * q;
      own -= (r - S) * p * rate;
      other -= (q - S) * q * rate;
      t += 1;
    }
    if (snaps) { const o = own, b = other, ee = e; snaps.close(t, () => [o, b, ee]); }
    return { own, other, steps: t, converged: e <= eps, first, last: prev,
             trend: rises && falls ? "non-monotone" : rises ? "rising" : falls ? "falling" : "flat" };
  }

  function rayLogits(K, own, other) {
    const z = new Float64Array(K * K).fill(other);
    for (let k = 0; k < K; k++) z[k * K + k] = own;
    return z;
  }

  // OOD logits of Q = V Z1 Vᵀ for M = diag(γ): (γ_n z1[n,k]) γ_k (dynamics.ood_start).
  function oodStart(z1, gamma, K) {
    const z = new Float64Array(K * K);
    for (let k = 0; k < K; k++)
      for (let n = 0; n < K; n++) z[k * K + n] = gamma[n] * z1[k * K + n] * gamma[k];
    return z;
  }

  // Source logits Z1 + (γ_n (z − z0)) γ_k (dynamics.source_logits, claim 7).
  function sourceLogits(z1, gamma, z0, z, K, out) {
    for (let k = 0; k < K; k++)
      for (let n = 0; n < K; n++) {
        const i = k * K + n;
        out[i] = z1[i] + gamma[n] * (z[i] - z0[i]) * gamma[k];
      }
    return out;
  }

  // The K×K descent of dynamics._Batch for one configuration. `observe(t, x, e)` sees the
  // logits and errors at every step before the stopping rule is applied.
  function descend(z0, K, eta, eps, maxSteps, observe) {
    const x = Float64Array.from(z0);
    const a = new Float64Array(K * K), r = new Float64Array(K * K);
    const e = new Float64Array(K), S = new Float64Array(K);
    const rate = eta / K;
    let t = 0, done = false;
    for (;;) {
      done = true;
      for (let k = 0; k < K; k++) {
        const o = k * K;
        let mx = x[o];
        for (let n = 1; n < K; n++) if (x[o + n] > mx) mx = x[o + n];
        let s = 0;
        for (let n = 0; n < K; n++) { a[o + n] = Math.exp(x[o + n] - mx); s += a[o + n]; }
        let ek = 0;
        for (let n = 0; n < K; n++) {
          a[o + n] = a[o + n] / s;
          const rn = n === k ? a[o + n] - 1.0 : a[o + n];
          r[o + n] = rn;
          ek += rn * rn;
        }
        ek *= 0.5;
        e[k] = ek;
        if (!(ek <= eps)) done = false;
      }
      if (observe) observe(t, x, e);
      if (done || t >= maxSteps) break;
      for (let k = 0; k < K; k++) {
        const o = k * K;
        let sk = 0;
        for (let n = 0; n < K; n++) sk += a[o + n] * r[o + n];
        S[k] = sk;
      }
      for (let k = 0; k < K; k++) {
        const o = k * K, sk = S[k];
        for (let n = 0; n < K; n++) x[o + n] -= (r[o + n] - sk) * a[o + n] * rate;
      }
      t += 1;
    }
    return { z: x, steps: t, converged: done };
  }

  // --- fine-tuning interventions (finetune/terms.py, finetune/engine.py) -----------------
  //
  // Replay λ, the L2 pull μ toward Q^(T1), projections off span(V) and query weights c_k, as
  // terms of one step on the pair (z_U, z_V), the OOD and the source logits:
  //   Δz_U = −η [(1−λ) A_l (g_U c) A_r + λ Mᵀ g_V M + μ (z_U − z_U^(T1))]
  //   Δz_V = −η [(1−λ) B_l (g_U c) B_rᵀ + λ g_V + μ (z_V − z_V^(T1))]
  // (A = I − MᵀM projected, else I; B = 0 projected, else M). The page runs parallel shifts,
  // M = diag(γ): every matrix product there is a product of diagonals, where BLAS adds only
  // exact zeros, so (γ_n g[n,k]) γ_k below is terms.py's result to the bit.
  const STALL_STEP = 1e-12;                       // setting.STALL_STEP
  const PROJECTIONS = ["none", "key", "query", "both"];   // setting.PROJECTIONS
  const WEIGHT_RULES = ["cosine", "drop-negative"];       // setting.WEIGHT_RULES
  const NUMBER = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;

  function number(v) {
    if (typeof v === "number") return v;
    return typeof v === "string" && NUMBER.test(v) ? Number(v) : NaN;
  }
  const shown = (v) => (Array.isArray(v) ? v.join(",") : String(v));

  // Protocol._check_interventions and Setting's length check: { interventions } (null for
  // plain fine-tuning) or { error } naming the field, the value and what it takes. Values
  // may be numbers or the text of the page's fields.
  function checkInterventions(spec, K) {
    spec = spec || {};
    const given = (key) => spec[key] !== undefined && spec[key] !== null && spec[key] !== "";
    const replay = given("replay") ? number(spec.replay) : 0;
    if (!(replay >= 0 && replay < 1))
      return { error: `replay λ: got '${shown(spec.replay)}'; expected a share λ with ` +
               "0 <= λ < 1 (λ = 1 would not fine-tune on U at all)" };
    const l2 = given("l2") ? number(spec.l2) : 0;
    if (!(Number.isFinite(l2) && l2 >= 0))
      return { error: `L2 μ: got '${shown(spec.l2)}'; expected a finite number >= 0` };
    const project = given("project") ? spec.project : "none";
    if (!PROJECTIONS.includes(project))
      return { error: `projection: got '${shown(project)}'; expected one of ${PROJECTIONS.join(", ")}` };
    let weights = null;
    if (given("weights") && spec.weights !== "none") {
      const w = spec.weights;
      if (WEIGHT_RULES.includes(w)) weights = w;
      else {
        const parts = Array.isArray(w) ? w : typeof w === "string" ? w.split(",") : [w];
        const values = parts.map(number);
        if (!values.length || !values.every((c) => Number.isFinite(c) && c >= 0) ||
            !values.some((c) => c !== 0))
          return { error: `weights: got '${shown(w)}'; expected numbers c_1,...,c_K (finite, ` +
                   `>= 0, not all 0) or a rule: ${WEIGHT_RULES.join(", ")}` };
        if (values.length !== K)
          return { error: `weights: got ${values.length} value${values.length === 1 ? "" : "s"}; ` +
                   `expected one weight per feature: K = ${K}` };
        weights = values;
      }
    }
    const plain = replay === 0 && l2 === 0 && project === "none" && weights === null;
    return { interventions: plain ? null : { replay, l2, project, weights } };
  }

  // terms.query_weights for M = diag(γ): the cosine of u_k to the pretraining centre is
  // Σ_n M[n, k] / √K = γ_k / √K (the column's other entries are exact zeros).
  function queryWeights(rule, gamma, K) {
    if (rule === null) return { c: new Float64Array(K).fill(1.0) };
    if (typeof rule !== "string") return { c: Float64Array.from(rule) };
    const root = Math.sqrt(K);
    const cos = gamma.map((g) => g / root);
    const kept = Float64Array.from(cos, (c) => rule === "cosine" ? Math.max(c, 0.0) : c >= 0 ? 1.0 : 0.0);
    if (!kept.some((c) => c !== 0))
      return { error: `weights: got '${rule}'; every OOD feature has a negative cosine to the ` +
               `pretraining centre (${cos.map((c) => fmtG(c, 3)).join(", ")}): nothing would ` +
               "be fine-tuned; give explicit weights" };
    if (rule === "cosine") {
      let sum = 0.0;
      for (let k = 0; k < K; k++) sum += kept[k];
      const scale = K / sum;
      for (let k = 0; k < K; k++) kept[k] *= scale;
    }
    return { c: kept };
  }

  // terms.recipe and terms.frozen_columns, diagonal M: which features the rule covers
  // (c_k > 0) and which OOD columns no step moves (no replay and c_k A_r[k, k] = 0).
  function recipe(iv, gamma, K) {
    const q = queryWeights(iv.weights, gamma, K);
    if (q.error) return q;
    const c = q.c;
    const left = iv.project === "key" || iv.project === "both";
    const right = iv.project === "query" || iv.project === "both";
    const A = Float64Array.from(gamma, (g) => 1.0 - g * g);     // I − MᵀM
    const covered = Array.from(c, (x) => x > 0);
    const frozen = Array.from(c, (x, k) => !iv.replay && (right ? x * A[k] : x) === 0);
    return { c, left, right, A, covered, frozen, scale: 1.0 - iv.replay, replay: iv.replay,
             l2: iv.l2 };
  }

  // terms.errors_and_gradient: e_k and ∂L/∂z = a (r − Σ_n a r) / K, one softmax per column.
  function errorsAndGradient(z, K, e, g, a) {
    for (let k = 0; k < K; k++) {
      const o = k * K;
      let mx = z[o];
      for (let n = 1; n < K; n++) if (z[o + n] > mx) mx = z[o + n];
      let s = 0;
      for (let n = 0; n < K; n++) { a[n] = Math.exp(z[o + n] - mx); s += a[n]; }
      let ek = 0, S = 0;
      for (let n = 0; n < K; n++) {
        a[n] = a[n] / s;
        const r = n === k ? a[n] - 1.0 : a[n];
        ek += r * r;
        S += a[n] * r;
      }
      e[k] = 0.5 * ek;
      for (let n = 0; n < K; n++) {
        const r = n === k ? a[n] - 1.0 : a[n];
        g[o + n] = a[n] * (r - S) / K;
      }
    }
  }

  // engine.finetune for one configuration: GD z ← z − η Σ terms on (z_U, z_V) until every
  // covered e_k(z_U) <= ε (reached), or every covered feature still above ε is frozen
  // (blocked), or a step moves no logit by more than STALL_STEP (stalled: a pull holds the
  // run), or maxSteps. observe(t, z_U, z_V) sees every iterate; a stalled run makes its
  // last step and is seen once more, as in engine.py.
  function finetuneTerms(zU1, zV1, gamma, K, plan, eta, eps, maxSteps, observe) {
    const zU = Float64Array.from(zU1), zV = Float64Array.from(zV1);
    const N = K * K, eU = new Float64Array(K), eV = new Float64Array(K);
    const gU = new Float64Array(N), gV = new Float64Array(N), a = new Float64Array(K);
    const dU = new Float64Array(N), dV = new Float64Array(N);
    const { c, left, right, A, covered, frozen, scale, replay, l2 } = plan;
    const share = Float64Array.from(c, (x) => scale * x);
    let steps = maxSteps, live = true, reached = false, blocked = false, stalled = false;
    for (let t = 0; ; t++) {
      errorsAndGradient(zU, K, eU, gU, a);
      let met = true, still = true;
      for (let k = 0; k < K; k++) {
        const within = eU[k] <= eps || !covered[k];
        met = met && within;
        still = still && (within || frozen[k]);
      }
      observe(t, zU, zV);
      if (live && still) { steps = t; reached = met; blocked = !met; live = false; }
      if (t === maxSteps || !live) break;
      if (replay) errorsAndGradient(zV, K, eV, gV, a);
      for (let k = 0; k < K; k++) {
        const o = k * K;
        for (let n = 0; n < K; n++) {
          const i = o + n;
          let g = gU[i] * share[k];                        // Fit: (1−λ) A_l (g_U c) A_r
          if (left) g = A[n] * g;
          if (right) g = g * A[k];
          dU[i] = g;
          dV[i] = left || right ? 0.0 : gamma[n] * (gU[i] * share[k]) * gamma[k];
          if (replay) {                                  // Replay: λ Mᵀ g_V M and λ g_V
            const h = replay * gV[i];
            dU[i] += gamma[n] * h * gamma[k];
            dV[i] += h;
          }
          if (l2) {                                      // Pull: μ (z − z^(T1))
            dU[i] += l2 * (zU[i] - zU1[i]);
            dV[i] += l2 * (zV[i] - zV1[i]);
          }
          dU[i] *= eta;
          dV[i] *= eta;
        }
      }
      if (l2) {
        let big = 0;
        for (let i = 0; i < N; i++) big = Math.max(big, Math.abs(dU[i]), Math.abs(dV[i]));
        if (big <= STALL_STEP) { steps = t; stalled = true; live = false; }
      }
      for (let i = 0; i < N; i++) { zU[i] -= dU[i]; zV[i] -= dV[i]; }
    }
    return { zU, zV, steps, reached, blocked, stalled };
  }

  // --- overlapping features, K = 2 (finetune/gram.py, predict._predict_gram) ---------------
  //
  // Unit v_1, v_2 with ⟨v_1, v_2⟩ = ρ: the columns of the Cholesky factor of [[1, ρ], [ρ, 1]]
  // (geometry.overlap), u_k = γ_k v_k + √(1 − γ_k²) w_k; G_V = VᵀV, G_U = UᵀU and M = VᵀU
  // are the products of those vectors. Pretraining z ← z − η (G_V g G_V) from 0; the OOD
  // start Mᵀ G_V⁻¹ z_V G_V⁻¹ M (two LU solves with partial pivoting, as numpy.linalg.solve);
  // fine-tuning the terms engine's plain step on (z_U, z_V): z_U −= η (G_U g_U G_U),
  // z_V −= η (M g_U Mᵀ); e_k = ½ Σ_n r_n s_n, g = a (s − Σ_n a s) / K with s = G r.
  // Matrices are column-major like z: A[k*2 + n] = A[n, k]. NumPy's 2×2 products and solves
  // may run through BLAS and LAPACK (fused multiply-adds, reciprocals): the last bits may
  // differ, so F_k agrees to ~1e-15 and T1, T2 are identical unless a stop falls within
  // rounding of ε (the tests compare both with `oodcalc predict --overlap`).
  const ORTHONORMAL_TOL = 1e-6;   // geometry.ORTHONORMAL_TOL

  function mm2(A, B) {            // A B, each term in NumPy's order (j = 0, then 1)
    const C = new Float64Array(4);
    for (let k = 0; k < 2; k++)
      for (let n = 0; n < 2; n++) C[k * 2 + n] = A[n] * B[k * 2] + A[2 + n] * B[k * 2 + 1];
    return C;
  }
  const tr2 = (A) => Float64Array.of(A[0], A[2], A[1], A[3]);

  // errors_and_gradient(z, G) for K = 2 (model.errors_and_gradient).
  function gramErrorsAndGradient(z, G, e, g) {
    const a = new Float64Array(4), r = new Float64Array(4);
    for (let k = 0; k < 2; k++) {
      const o = 2 * k;
      const mx = z[o + 1] > z[o] ? z[o + 1] : z[o];
      const w0 = Math.exp(z[o] - mx), w1 = Math.exp(z[o + 1] - mx), sum = w0 + w1;
      a[o] = w0 / sum; a[o + 1] = w1 / sum;
      r[o] = a[o] - (k === 0 ? 1.0 : 0.0); r[o + 1] = a[o + 1] - (k === 1 ? 1.0 : 0.0);
    }
    const s = mm2(G, r);
    for (let k = 0; k < 2; k++) {
      const o = 2 * k;
      e[k] = 0.5 * (r[o] * s[o] + r[o + 1] * s[o + 1]);
      if (g) {
        const S = a[o] * s[o] + a[o + 1] * s[o + 1];
        g[o] = a[o] * (s[o] - S) / 2;
        g[o + 1] = a[o + 1] * (s[o + 1] - S) / 2;
      }
    }
    return e;
  }

  // The vectors of geometry.overlap(ρ, γ) and their Grams.
  function overlapGeometry(rho, gamma) {
    const K = 2, L = Math.sqrt(1.0 - rho * rho);          // cholesky([[1, ρ], [ρ, 1]])
    const moved = [0, 1].filter((k) => Math.sqrt(Math.max(1.0 - gamma[k] ** 2, 0.0)) > 0.0);
    const d = K + moved.length;
    const V = [new Float64Array(d), new Float64Array(d)];
    V[0][0] = 1.0; V[1][0] = rho; V[1][1] = L;
    const U = V.map((v, k) => Float64Array.from(v, (x) => x * gamma[k]));
    moved.forEach((k, i) => { U[k][K + i] = Math.sqrt(Math.max(1.0 - gamma[k] ** 2, 0.0)); });
    const dot = (x, y) => { let t = 0.0; for (let i = 0; i < d; i++) t += x[i] * y[i]; return t; };
    const gramOf = (P, Q) => {
      const G = new Float64Array(4);
      for (let k = 0; k < 2; k++) for (let n = 0; n < 2; n++) G[k * 2 + n] = dot(P[n], Q[k]);
      return G;
    };
    return { G_V: gramOf(V, V), G_U: gramOf(U, U), M: gramOf(V, U) };
  }

  // numpy.linalg.solve(G, B) for 2×2: LU with partial pivoting (LAPACK getrf, getrs).
  function solve2(G, B) {
    const swap = Math.abs(G[1]) > Math.abs(G[0]);
    const p0 = swap ? 1 : 0, p1 = 1 - p0;
    const u00 = G[p0], u01 = G[2 + p0], l = G[p1] * (1.0 / u00);
    const u11 = G[2 + p1] - l * u01;
    const X = new Float64Array(4);
    for (let k = 0; k < 2; k++) {
      const y0 = B[k * 2 + p0], y1 = B[k * 2 + p1] - l * y0;
      const x1 = y1 / u11;
      X[k * 2 + 1] = x1;
      X[k * 2] = (y0 - u01 * x1) / u00;
    }
    return X;
  }

  // gram.ood_start: Mᵀ G_V⁻¹ z_V G_V⁻¹ M.
  function gramOodStart(zV, G_V, M) {
    const W = tr2(solve2(G_V, tr2(solve2(G_V, zV))));
    return mm2(mm2(tr2(M), W), M);
  }

  // predict for oc.overlap(ρ, γ) at K = 2, plain fine-tuning (predict._predict_gram).
  function runOverlap(result, rho, gamma, eps, eta, etaFt, maxSteps, record, started) {
    const K = 2;
    const { G_V, G_U, M } = overlapGeometry(rho, gamma);
    result.rho = rho;
    const e = new Float64Array(2), g = new Float64Array(4);
    // 1. pretraining: z ← z − η (G_V g G_V) from Q = 0
    const preSnaps = record ? new Snapshots(SNAPSHOTS) : null;
    const cap1 = Math.min(maxSteps, LIMITS.pretrainSteps);
    let z = new Float64Array(4), T1 = 0;
    for (;; T1++) {
      gramErrorsAndGradient(z, G_V, e, g);
      const done = e[0] <= eps && e[1] <= eps;
      if (preSnaps) { const zz = Float64Array.from(z), ee = Float64Array.from(e); preSnaps.offer(T1, () => [zz, ee]); }
      if (done) break;
      if (T1 >= cap1) {
        result.error = `pretraining did not meet the stopping rule within ${T1.toLocaleString()} ` +
          "steps (the page's budget); run the command below";
        result.ms = performance.now() - started;
        return result;
      }
      const X = mm2(mm2(G_V, g), G_V);
      for (let i = 0; i < 4; i++) z[i] -= eta * X[i];
    }
    if (preSnaps) { const zz = Float64Array.from(z), ee = Float64Array.from(e); preSnaps.close(T1, () => [zz, ee]); }
    const z1 = z;
    result.T1 = T1;
    result.alpha = z1[0];
    result.beta = z1[1];
    result.alpha_star = alphaStar(K, eps / (1.0 - rho));    // theory.gram_alpha_star, K = 2
    const eSrc0 = gramErrorsAndGradient(z1, G_V, new Float64Array(2), null);
    result.pretrain_error = eSrc0[0];
    // 2. the OOD logits at T1
    const z0 = gramOodStart(z1, G_V, M);
    const eOod0 = gramErrorsAndGradient(z0, G_U, new Float64Array(2), null);
    result.ood_error = Array.from(eOod0);
    result.ood_loss = (eOod0[0] + eOod0[1]) / K;
    result.step_size_bound = null;
    // 3. fine-tuning (engine.finetune with terms.recipe's plain Fit: A = G_U, B = M)
    const cap = Math.min(maxSteps, Math.floor(LIMITS.termsWork / (K * K)));
    const ftSnaps = record ? new Snapshots(SNAPSHOTS) : null;
    const zU = Float64Array.from(z0), zV = Float64Array.from(z1);
    const eU = new Float64Array(2), gU = new Float64Array(4), eV = new Float64Array(2);
    const trend = new SourceTrend(K);
    let T2 = 0;
    for (;; T2++) {
      gramErrorsAndGradient(zU, G_U, eU, gU);
      gramErrorsAndGradient(zV, G_V, eV, null);
      trend.offer(T2, eV);
      if (ftSnaps) { const u = Float64Array.from(zU), eu = Float64Array.from(eU), ev = Float64Array.from(eV), v = Float64Array.from(zV); ftSnaps.offer(T2, () => [u, eu, ev, v]); }
      if (eU[0] <= eps && eU[1] <= eps) break;
      if (T2 >= cap) return stuck(result, T2, started, cap < maxSteps && LIMITS.termsWork);
      const dU = mm2(mm2(G_U, gU), G_U), dV = mm2(mm2(M, gU), tr2(M));
      for (let i = 0; i < 4; i++) { zU[i] -= dU[i] * etaFt; zV[i] -= dV[i] * etaFt; }
    }
    if (ftSnaps) { const u = Float64Array.from(zU), eu = Float64Array.from(eU), ev = Float64Array.from(eV), v = Float64Array.from(zV); ftSnaps.close(T2, () => [u, eu, ev, v]); }
    result.engine = "Gram-matrix K×K descent, terms on (z_U, z_V) (JavaScript)";
    result.T2 = T2;
    trend.fill(result);
    result.ood_error_after = Array.from(gramErrorsAndGradient(zU, G_U, new Float64Array(2), null));
    result.first_step = trend.firstStep(T2);
    result.initial_direction = result.first_step.map(direction);
    // the overlap-aware first-order criterion C_k = −K Σ_n g_V[n, k] (M g_U Mᵀ)[n, k]
    // (theory.overlap_first_order), at the logits of T1
    const gU0 = new Float64Array(4), gV1 = new Float64Array(4);
    gramErrorsAndGradient(z0, G_U, new Float64Array(2), gU0);
    gramErrorsAndGradient(z1, G_V, new Float64Array(2), gV1);
    const move = mm2(mm2(M, gU0), tr2(M));
    result.D_k = [0, 1].map((k) => -K * (gV1[2 * k] * move[2 * k] + gV1[2 * k + 1] * move[2 * k + 1]));
    result.D_k_direction = result.D_k.map(direction);
    result.D_k_agrees = result.D_k_direction.map((d, k) => d === result.initial_direction[k]);
    verdicts(result, gamma, result.trend);
    result.ms = performance.now() - started;
    if (record) result.paths = { pre: preSnaps, ft: ftSnaps, z1, z0, gamma: gamma.slice(), gram: true };
    return result;
  }

  // The overlap ρ as the page takes it: { rho } (0: orthonormal features) or { error }.
  function checkOverlap(value, K) {
    if (value === undefined || value === null || value === "") return { rho: 0 };
    const rho = number(value);
    if (!(Number.isFinite(rho) && rho > -1 && rho < 1))
      return { error: `overlap ρ: got '${shown(value)}'; expected a number with −1 < ρ < 1 ` +
               "(at either end the two features coincide)" };
    if (rho !== 0 && K !== 2)
      return { error: `overlap ρ: got '${shown(value)}' with K = ${K}; the page runs ` +
               "overlapping features for K = 2 (oodcalc predict --overlap takes any K)" };
    if (rho !== 0 && Math.abs(rho) <= ORTHONORMAL_TOL)
      return { error: `overlap ρ: got '${shown(value)}'; give 0 or |ρ| > ${ORTHONORMAL_TOL} ` +
               "(features within that of orthonormal run the orthonormal dynamics)" };
    return { rho };
  }

  // --- closed forms (theory.py) ----------------------------------------------------------

  function alphaStar(K, eps) {
    const delta = Math.sqrt(2.0 * eps * (K - 1) / K);
    const s = delta >= 1.0 ? 0.0 : Math.max(0.0, Math.log((K - 1) * (1.0 - delta) / delta));
    return (K - 1) / K * s;
  }

  // Python's format(x, ".4g") (or "+.4g"), enough for the verdicts' conditions.
  function fmtG(x, digits, plus) {
    let s;
    if (x === 0) s = Object.is(x, -0) ? "-0" : "0";
    else {
      const exponent = Number(Number(x).toExponential(digits - 1).split("e")[1]);
      if (exponent < -4 || exponent >= digits) {
        let [mant, ex] = Number(x).toExponential(digits - 1).split("e");
        if (mant.includes(".")) mant = mant.replace(/0+$/, "").replace(/\.$/, "");
        const sign = ex[0] === "-" ? "-" : "+";
        ex = ex.replace(/^[+-]/, "");
        s = mant + "e" + sign + (ex.length < 2 ? "0" + ex : ex);
      } else {
        s = Number(x).toPrecision(digits);
        if (s.includes(".")) s = s.replace(/0+$/, "").replace(/\.$/, "");
      }
    }
    if (plus && !s.startsWith("-")) s = "+" + s;
    return s;
  }

  // theory.regime_names and the condition text of theory._regimes.
  function regimes(gamma, corrected) {
    const K = gamma.length, factor = corrected ? K - 1 : 1;
    const out = [];
    for (let k = 0; k < K; k++) {
      let m0 = -1, m1 = -1, pmax = -Infinity, pmin = Infinity;
      for (let m = 0; m < K; m++) {
        if (m === k) continue;
        const prod = gamma[k] * gamma[m];
        if (prod > pmax) { pmax = prod; m0 = m; }
        if (prod < pmin) { pmin = prod; m1 = m; }
      }
      const lhs0 = -pmax, lhs1 = -pmin, square = gamma[k] ** 2;
      let unaffected = Math.abs(gamma[k]) <= ZERO_TOL;
      if (K === 2) unaffected = unaffected || Math.abs(square - lhs0) <= ZERO_TOL;
      let regime = "undetermined";
      if (lhs1 < square) regime = "backward-transfer";
      if (lhs0 > factor * square) regime = "forgetting";
      if (unaffected) regime = "unaffected";
      const c0 = -gamma[k] * gamma[m0], c1 = -gamma[k] * gamma[m1];
      const g0 = `−γ${k + 1}·γ${m0 + 1} = ${fmtG(c0, 4, true)}`;
      const g1 = `−γ${k + 1}·γ${m1 + 1} = ${fmtG(c1, 4, true)}`;
      const sq = `γ${k + 1}² = ${fmtG(square, 4)}`;
      const threshold = factor === 1 ? sq : `${factor}·γ${k + 1}² = ${fmtG(factor * square, 4)}`;
      const condition = {
        "unaffected": `${g0} = ${sq}: source margins of v${k + 1} cannot move`,
        "forgetting": `${g0} > ${threshold}`,
        "backward-transfer": `${g1} < ${sq}`,
        "undetermined": factor === 1 ? `${g0} <= ${sq} <= ${g1}`
          : `${g0} <= ${threshold}, ${g1} >= ${sq}`,
      }[regime];
      out.push({ regime, condition, m0: m0 + 1, m1: m1 + 1 });
    }
    return out;
  }

  // theory.first_step_terms: D_k and the magnitudes it is made of.
  function firstStepTerms(gamma, zOod, K) {
    const a = new Float64Array(K * K), w = new Float64Array(K);
    for (let k = 0; k < K; k++) {
      const o = k * K;
      let mx = zOod[o];
      for (let n = 1; n < K; n++) if (zOod[o + n] > mx) mx = zOod[o + n];
      let s = 0;
      for (let n = 0; n < K; n++) { w[n] = Math.exp(zOod[o + n] - mx); s += w[n]; }
      for (let n = 0; n < K; n++) a[o + n] = w[n] / s;
    }
    const D = new Float64Array(K), scale = new Float64Array(K);
    for (let k = 0; k < K; k++) {
      const o = k * K, ak = a[o + k];
      let sumSq = 0;
      for (let n = 0; n < K; n++) sumSq += a[o + n] * a[o + n];
      let cross = 0, crossAbs = 0, shareSum = 0, sizeSum = 0;
      for (let n = 0; n < K; n++) {
        let share = a[o + n] * (a[o + n] + ak - sumSq);
        let size = a[o + n] * (a[o + n] + ak + sumSq);
        if (n === k) { share = 0.0; size = 0.0; }
        const c = gamma[n] * gamma[k];
        cross += c * share;
        crossAbs += Math.abs(c) * size;
        shareSum += share;
        sizeSum += size;
      }
      const square = gamma[k] ** 2;
      D[k] = -cross - (K - 1) * square * shareSum;
      scale[k] = crossAbs + (K - 1) * square * sizeSum;
    }
    return { D, scale };
  }

  function direction(change) {       // report.directions
    return Math.abs(change) <= TREND_TOL ? "flat" : change > 0 ? "rising" : "falling";
  }

  // The paper's and the corrected verdicts per feature, and whether the exact trend bears
  // the paper's out (report.FeatureForgetting.theorem_holds; null where it says nothing).
  function verdicts(result, gamma, trend) {
    const paper = regimes(gamma, false), corr = regimes(gamma, true);
    result.regime = paper.map((r) => r.regime);
    result.condition = paper.map((r) => r.condition);
    result.corrected_regime = corr.map((r) => r.regime);
    result.corrected_condition = corr.map((r) => r.condition);
    const expected = { "forgetting": "rising", "backward-transfer": "falling", "unaffected": "flat" };
    result.theorem_holds = result.regime.map((r, k) =>
      expected[r] === undefined ? null : trend[k] === expected[r]);
  }

  function trendName(rises, falls) {
    return rises && falls ? "non-monotone" : rises ? "rising" : falls ? "falling" : "flat";
  }

  // predict._Trend: per feature the source loss e_k / K at the start and now, whether it
  // ever rose or fell by more than TREND_TOL, and the losses of the first two steps; no
  // fresh array per step (a long run makes millions).
  class SourceTrend {
    constructor(K) {
      this.K = K;
      this.first = new Float64Array(K);
      this.prev = new Float64Array(K);
      this.rises = new Array(K).fill(false);
      this.falls = new Array(K).fill(false);
      this.losses = [];
    }
    offer(t, errors) {               // errors: e_k of the source at step t
      for (let k = 0; k < this.K; k++) {
        const loss = errors[k] / this.K;
        if (t === 0) this.first[k] = loss;
        else {
          const change = loss - this.prev[k];
          if (change > TREND_TOL) this.rises[k] = true;
          if (change < -TREND_TOL) this.falls[k] = true;
        }
        this.prev[k] = loss;
      }
      if (t < 2) this.losses.push(Array.from(this.prev));
    }
    // F_k, F, the losses before and after and the trend, into the result
    fill(result) {
      result.F_k = Array.from(this.prev, (v, k) => v - this.first[k]);
      result.F = result.F_k.reduce((s, x) => s + x, 0);
      result.loss_before = Array.from(this.first);
      result.loss_after = Array.from(this.prev);
      result.trend = this.rises.map((r, k) => trendName(r, this.falls[k]));
    }
    // the exact first step of every L_{v_k} (zeros when no step was taken)
    firstStep(T2) {
      return T2 > 0 && this.losses.length > 1
        ? this.losses[1].map((v, k) => v - this.losses[0][k]) : new Array(this.K).fill(0);
    }
  }

  // --- one point: what `oodcalc predict --gamma ...` computes ---------------------------

  // termsWork: a step with interventions costs up to three softmaxes and both logits, and a
  // run may never reach its rule (replay against a projection): a few seconds at most.
  const LIMITS = { pretrainSteps: 2e7, finetuneWork: 2e8, termsWork: 1e7, maxSteps: 1e7 };

  function run(gamma, eps, eta, etaFt, options) {
    options = options || {};
    const record = options.record !== false;
    const K = gamma.length;
    const started = performance.now();
    const maxSteps = options.maxSteps || LIMITS.maxSteps;
    const result = { K, gamma: gamma.slice(), eps, eta, eta_ft: etaFt };
    const asked = checkInterventions(options.interventions, K);
    if (asked.error) {
      result.error = asked.error;
      result.ms = performance.now() - started;
      return result;
    }
    const iv = asked.interventions;
    result.interventions = iv;
    const overlap = checkOverlap(options.rho, K);
    if (overlap.error || (overlap.rho !== 0 && iv)) {
      result.error = overlap.error || "overlap ρ: the page runs overlapping features with " +
        "plain fine-tuning only (oodcalc predict --overlap takes the interventions)";
      result.ms = performance.now() - started;
      return result;
    }
    if (overlap.rho !== 0)
      return runOverlap(result, overlap.rho, gamma, eps, eta, etaFt, maxSteps, record, started);

    // 1. pretraining: the ray's scalar recurrence from Q = 0
    const preSnaps = record ? new Snapshots(SNAPSHOTS) : null;
    const ray = rayLoop(0.0, 0.0, K, eta, eps, Math.min(maxSteps, LIMITS.pretrainSteps),
                        null, preSnaps, null);
    if (!ray.converged) {
      result.error = `pretraining did not meet the stopping rule within ${ray.steps} steps ` +
        "(the page's budget); run the command below";
      result.ms = performance.now() - started;
      return result;
    }
    const z1 = rayLogits(K, ray.own, ray.other);
    result.T1 = ray.steps;
    result.alpha = ray.own;
    result.beta = ray.other;
    result.alpha_star = alphaStar(K, eps);
    const w = new Float64Array(K);
    const eSrc0 = columnErrors(z1, K, new Float64Array(K), w);
    result.pretrain_error = eSrc0[0];

    // 2. OOD logits at T1 (claim 5)
    const z0 = oodStart(z1, gamma, K);
    const eOod0 = columnErrors(z0, K, new Float64Array(K), w);
    result.ood_error = Array.from(eOod0);
    result.ood_loss = eOod0.reduce((s, x) => s + x, 0) / K;
    let bound = Infinity;
    for (let k = 0; k < K; k++)
      for (let n = 0; n < K; n++) if (n !== k) bound = Math.min(bound, Math.exp(-z0[k * K + n]));
    result.step_size_bound = bound;

    // 3. fine-tuning on U, the source view followed at every step
    if (iv) return runTerms(result, iv, z1, z0, etaFt, eps, maxSteps, record, preSnaps, started);
    const onRay = gamma.every((g) => g === gamma[0]);
    const ftSnaps = record ? new Snapshots(SNAPSHOTS) : null;
    const src = new Float64Array(K * K), eSrc = new Float64Array(K), eOod = new Float64Array(K);
    let T2, before, after, trend, zEnd;
    if (onRay) {
      const c = gamma[0];
      const r2 = rayLoop(z0[0], z0[1], K, etaFt, eps, maxSteps, [z1[0], z1[1], c * c],
                         ftSnaps, null);
      if (!r2.converged) return stuck(result, r2.steps, started);
      T2 = r2.steps;
      before = new Array(K).fill(r2.first);
      after = new Array(K).fill(r2.last);
      trend = new Array(K).fill(r2.trend);
      zEnd = rayLogits(K, r2.own, r2.other);
      result.engine = "symmetric-ray recurrence (JavaScript)";
    } else {
      const cap = Math.min(maxSteps, Math.floor(LIMITS.finetuneWork / (K * K)));
      const source = new SourceTrend(K);
      const ft = descend(z0, K, etaFt, eps, cap, (t, x, e) => {
        sourceLogits(z1, gamma, z0, x, K, src);
        source.offer(t, columnErrors(src, K, eSrc, w));
        if (ftSnaps) ftSnaps.offer(t, () => [Float64Array.from(x), Float64Array.from(e),
                                             Float64Array.from(eSrc)]);
      });
      if (!ft.converged)
        return stuck(result, ft.steps, started, ft.steps >= cap && cap < maxSteps && LIMITS.finetuneWork);
      T2 = ft.steps;
      before = Array.from(source.first);
      after = Array.from(source.prev);
      trend = source.rises.map((r, k) => trendName(r, source.falls[k]));
      zEnd = ft.z;
      result.engine = "K×K descent (JavaScript)";
    }
    if (ftSnaps && onRay) {
      // the ray's snapshots hold (own, other, e); expand them to K×K for the charts
      ftSnaps.items = ftSnaps.items.map(([o, b, e]) => {
        const z = rayLogits(K, o, b);
        const s = sourceLogits(z1, gamma, z0, z, K, new Float64Array(K * K));
        return [z, new Float64Array(K).fill(e), columnErrors(s, K, new Float64Array(K), w)];
      });
    } else if (ftSnaps) {
      const x = zEnd;
      ftSnaps.close(T2, () => {
        const s = sourceLogits(z1, gamma, z0, x, K, new Float64Array(K * K));
        return [Float64Array.from(x), columnErrors(x, K, new Float64Array(K), w),
                columnErrors(s, K, new Float64Array(K), w)];
      });
    }
    result.T2 = T2;
    result.F_k = after.map((v, k) => v - before[k]);
    result.F = result.F_k.reduce((s, x) => s + x, 0);
    result.loss_before = before;
    result.loss_after = after;
    result.trend = trend;
    result.ood_error_after = Array.from(columnErrors(zEnd, K, eOod, w));

    // the exact first step (none when the rule held at T1)
    let firstStep = new Array(K).fill(0);
    if (T2 > 0) {
      const one = descend(z0, K, etaFt, 0.0, 1, null);
      sourceLogits(z1, gamma, z0, one.z, K, src);
      const e1 = columnErrors(src, K, new Float64Array(K), w);
      firstStep = Array.from(e1, (v, k) => (v - eSrc0[k]) / K);
    }
    result.first_step = firstStep;
    result.initial_direction = firstStep.map(direction);
    const { D, scale } = firstStepTerms(gamma, z0, K);
    result.D_k = Array.from(D);
    result.D_k_direction = result.D_k.map((d, k) =>
      Math.abs(d) <= FLAT_RTOL * scale[k] ? "flat" : d > 0 ? "rising" : "falling");
    result.D_k_agrees = result.D_k_direction.map((d, k) => d === result.initial_direction[k]);
    verdicts(result, gamma, trend);
    result.ms = performance.now() - started;
    if (record) result.paths = { pre: preSnaps, ft: ftSnaps, z1, z0, gamma: gamma.slice() };
    return result;
  }

  // Fine-tuning with interventions (predict._finetune_terms): the terms engine on both
  // logits, the source losses e_k(z_V) / K read at every step. The closed forms of claims 8
  // and 9 (regimes, D_k, the step-size bound) describe plain fine-tuning: null here.
  function runTerms(result, iv, z1, z0, etaFt, eps, maxSteps, record, preSnaps, started) {
    const K = result.K, gamma = result.gamma;
    const plan = recipe(iv, gamma, K);
    if (plan.error) {
      result.error = plan.error;
      result.ms = performance.now() - started;
      return result;
    }
    const cap = Math.min(maxSteps, Math.floor(LIMITS.termsWork / (K * K)));
    const ftSnaps = record ? new Snapshots(SNAPSHOTS) : null;
    const w = new Float64Array(K), eSrc = new Float64Array(K), eOod = new Float64Array(K);
    const trend = new SourceTrend(K);
    let lastU = null, lastV = null;
    const run = finetuneTerms(z0, z1, gamma, K, plan, etaFt, eps, cap, (t, zU, zV) => {
      trend.offer(t, columnErrors(zV, K, eSrc, w));
      lastU = zU; lastV = zV;
      if (ftSnaps) ftSnaps.offer(t, () => [Float64Array.from(zU), columnErrors(zU, K, new Float64Array(K), w),
                                           Float64Array.from(eSrc), Float64Array.from(zV)]);
    });
    if (!(run.reached || run.blocked || run.stalled))
      return stuck(result, run.steps, started, cap < maxSteps && LIMITS.termsWork);
    const T2 = run.steps;
    if (ftSnaps) ftSnaps.close(T2, () => [Float64Array.from(lastU), columnErrors(lastU, K, new Float64Array(K), w),
                                          columnErrors(lastV, K, new Float64Array(K), w), Float64Array.from(lastV)]);
    result.engine = "terms on (z_U, z_V) (JavaScript)";
    result.step_size_bound = null;
    result.T2 = T2;
    result.reached = run.reached;
    result.blocked = run.blocked;
    result.stalled = run.stalled;
    result.weights = Array.from(plan.c);
    result.covered = plan.covered;
    result.frozen = plan.frozen;
    trend.fill(result);
    result.ood_error_after = Array.from(columnErrors(run.zU, K, eOod, w));
    result.first_step = trend.firstStep(T2);
    result.initial_direction = result.first_step.map(direction);
    const none = new Array(K).fill(null);
    for (const key of ["D_k", "D_k_direction", "D_k_agrees", "regime", "condition",
                       "corrected_regime", "corrected_condition", "theorem_holds"])
      result[key] = none.slice();
    result.note = run.reached ? null : notReached(run, plan, eps, iv, K);
    result.ms = performance.now() - started;
    if (record) result.paths = { pre: preSnaps, ft: ftSnaps, z1, z0, gamma: gamma.slice() };
    return result;
  }

  // predict._not_reached: why the rule on U does not hold at T2.
  function notReached(run, plan, eps, iv, K) {
    const e = columnErrors(run.zU, K, new Float64Array(K), new Float64Array(K));
    const above = [];
    for (let k = 0; k < K; k++) if (plan.covered[k] && e[k] > eps) above.push(k);
    const where = above.map((k) => `e_${k + 1} = ${fmtG(e[k], 3)}`).join(", ");
    const head = `the stopping rule on U was not reached (${where} > eps_ft = ${fmtG(eps, 6)})`;
    if (run.blocked) {
      const frozen = above.filter((k) => plan.frozen[k]).map((k) => `u${k + 1}`).join(", ");
      const side = iv.project === "both" ? "two-sided" : `${iv.project}-side`;
      return `${head}: the ${side} projection leaves ${frozen} no update (in span(V)); ` +
        `fine-tuning stopped at T2 = ${run.steps}, when every other feature met the rule`;
    }
    return `${head}: fine-tuning settled at T2 = ${run.steps}, where a step moves no logit by ` +
      `more than ${fmtG(STALL_STEP, 6)} (the pull toward the pretrained weights balances the fit)`;
  }

  // budget: the page's budget of logit updates that cut the run short (false: the step cap)
  function stuck(result, steps, started, budget) {
    const rule = result.interventions ? "the stopping rule on U was not reached" :
      "fine-tuning did not meet the stopping rule";
    result.error = budget
      ? `fine-tuning stopped after ${steps.toLocaleString()} steps, the page's budget of ` +
        `${budget.toExponential(0)} logit updates (${rule}); run the command below`
      : `${rule} within ${steps.toLocaleString()} steps`;
    result.ms = performance.now() - started;
    return result;
  }

  return { run, checkInterventions, checkOverlap, overlapGeometry, gramErrorsAndGradient,
           gramOodStart, regimes, alphaStar, columnErrors, oodStart, sourceLogits, rayLogits,
           firstStepTerms, fmtG, TREND_TOL, LIMITS };
})();

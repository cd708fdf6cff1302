// Matrix filters, the detail panel and the charts (uPlot, inlined before this script).  Everything is in the
// page: no network, works from file://.  Chart data is JSON: a panel's in its plot's data-values attribute, the
// history's in #history-data's; the page's one script is uPlot and this.  uPlot writes labels as text, never markup.
(function () {
  "use strict";
  var detail = document.getElementById("detail");
  var matrix = document.getElementById("matrix");
  var placeholder = detail.innerHTML;
  var cells = Array.prototype.slice.call(matrix.querySelectorAll("td.cell"));
  var FONT = "12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  var LABEL_FONT = "bold 12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  var PALETTE = ["#2f6fdf", "#e0561b", "#2a9d4b", "#8e44ad", "#c0392b", "#16a085", "#d4a017", "#34495e",
                 "#e84393", "#7f8c8d"];
  window.conformanceCharts = {};

  function fmtBytes(n) {
    if (n === null || n === undefined) return "";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0, v = n;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return i === 0 ? Math.round(v) + " B" : +v.toPrecision(3) + " " + units[i];
  }
  // Round byte steps: 1, 2, 2.5, 5 x 10^k of B, KiB, MiB... (uPlot picks the first that leaves room).
  var BYTE_INCRS = [];
  [1, 1024, 1048576, 1073741824].forEach(function (unit) {
    [1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 250, 500].forEach(function (m) {
      if (m * unit >= 1) BYTE_INCRS.push(m * unit);
    });
  });
  function data(el) { return JSON.parse(el.dataset.values); }
  function widthOf(el) { return Math.max(280, Math.floor(el.getBoundingClientRect().width)); }
  function axis(label, extra) {
    var a = {label: label, font: FONT, labelFont: LABEL_FONT, stroke: "#333", grid: {stroke: "#eceef1"},
             ticks: {stroke: "#ccc"}};
    for (var k in extra) a[k] = extra[k];
    return a;
  }
  // One tick per run, labelled with its date (and torch version where it changed); where the labels would not
  // fit side by side at the plot's width, the run's number only (the legend and the list beside name it in full).
  function runAxis(labels, width) {
    var longest = Math.max.apply(null, labels.map(function (l) { return l.length; }));
    var fits = labels.length * longest * 7 <= 0.85 * width;
    return axis(fits ? "run" : "run #", {
      splits: function () { return labels.map(function (_, i) { return i; }); },
      values: function (u, splits) {
        return splits.map(function (i) { var l = labels[i]; return l === undefined ? "" : fits ? l : l.split(" ")[0]; });
      },
      size: 50, gap: 6,
    });
  }
  function bytesAxis(label) {
    return axis(label, {size: 78, incrs: BYTE_INCRS, values: function (u, s) { return s.map(fmtBytes); }});
  }
  function indices(n) { var a = []; for (var i = 0; i < n; i++) a.push(i); return a; }
  // Whole-number steps for a count axis (never a half pair).
  var COUNT_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000];
  // A legend over runs shows the latest run's values until the cursor picks another run, and again when it
  // leaves the plot: never a row of empty values.
  function legendAtLast(n) {
    function last(u) { if (u.cursor.idx === null || u.cursor.idx === undefined) u.setLegend({idx: n - 1}); }
    return {ready: [last], setCursor: [last]};
  }

  // ---------------------------------------------------------------- memory timeline (in the panel)
  function timeline(el) {
    var d = data(el);
    var series = [{label: "step progress", value: function (u, v) { return v === null ? "" : v.toFixed(3); }}];
    d.series.forEach(function (s) {
      series.push({label: s.label, stroke: s.colour, width: 2, points: {show: false},
                   dash: s.key === "model" ? [6, 3] : s.key === "program" ? [2, 2] : undefined,
                   paths: uPlot.paths.stepped({align: 1}), value: function (u, v) { return fmtBytes(v); }});
    });
    var top = Math.max.apply(null, d.series.map(function (s) { return Math.max(s.peak, Math.max.apply(null, s.y)); }));
    var opts = {
      width: widthOf(el), height: 300, series: series,
      scales: {x: {time: false, range: [0, 1]}, y: {range: [0, top > 0 ? top * 1.08 : 1]}},
      axes: [axis("step progress (0 = step start, 1 = step end)", {values: function (u, s) {
               return s.map(function (v) { return +v.toFixed(2); }); }}),
             bytesAxis("live bytes")],
      legend: {live: true},
      hooks: {draw: [function (u) {  // each series' peak (dotted line, ●) and residual (◆ at progress 1)
        var ctx = u.ctx, r = uPlot.pxRatio;
        ctx.save();
        d.series.forEach(function (s) {
          var y = u.valToPos(s.peak, "y", true), x0 = u.bbox.left, x1 = u.bbox.left + u.bbox.width;
          ctx.strokeStyle = s.colour; ctx.globalAlpha = 0.45; ctx.setLineDash([2 * r, 3 * r]);
          ctx.beginPath(); ctx.moveTo(x0, y); ctx.lineTo(x1, y); ctx.stroke();
          ctx.globalAlpha = 1; ctx.setLineDash([]);
          var i = s.y.indexOf(s.peak);
          if (i >= 0) { ctx.fillStyle = s.colour; ctx.beginPath(); ctx.arc(u.valToPos(d.x[i], "x", true), y, 4 * r, 0, 7); ctx.fill(); }
          var ry = u.valToPos(s.residual, "y", true);
          ctx.fillStyle = "#fff"; ctx.lineWidth = 2 * r; ctx.beginPath();
          ctx.moveTo(x1, ry - 5 * r); ctx.lineTo(x1 + 5 * r, ry); ctx.lineTo(x1, ry + 5 * r); ctx.lineTo(x1 - 5 * r, ry);
          ctx.closePath(); ctx.fill(); ctx.stroke();
        });
        ctx.restore();
      }]},
    };
    return new uPlot(opts, [d.x].concat(d.series.map(function (s) { return s.y; })), el);
  }

  // ---------------------------------------------------------------- a pair's peak and residual over runs
  function markFlips(flips) {
    return function (u) {
      var ctx = u.ctx, r = uPlot.pxRatio;
      ctx.save();
      flips.forEach(function (kind, i) {
        if (!kind) return;
        var x = u.valToPos(i, "x", true), y = u.bbox.top + 8 * r;
        ctx.fillStyle = kind === "regression" ? "#c62828" : "#2e7d32";
        ctx.beginPath();  // ▼ regression, ▲ fix
        if (kind === "regression") { ctx.moveTo(x - 6 * r, y - 5 * r); ctx.lineTo(x + 6 * r, y - 5 * r); ctx.lineTo(x, y + 5 * r); }
        else { ctx.moveTo(x - 6 * r, y + 5 * r); ctx.lineTo(x + 6 * r, y + 5 * r); ctx.lineTo(x, y - 5 * r); }
        ctx.closePath(); ctx.fill();
        ctx.strokeStyle = ctx.fillStyle; ctx.globalAlpha = 0.3; ctx.beginPath();
        ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke(); ctx.globalAlpha = 1;
      });
      ctx.restore();
    };
  }
  function pairTrend(el) {
    var d = data(el);
    var opts = {
      width: widthOf(el), height: 220,
      series: [{label: "run", value: function (u, v) { return v === null ? "" : d.runs[v] + " (" + d.status[v] + ")"; }},
               {label: "measured peak", stroke: "#e0561b", width: 2, points: {size: 7}, value: function (u, v) { return fmtBytes(v); }},
               {label: "measured residual", stroke: "#2f6fdf", width: 2, dash: [6, 3], points: {size: 7},
                value: function (u, v) { return fmtBytes(v); }}],
      scales: {x: {time: false, range: [-0.3, d.runs.length - 0.7]}, y: {range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.15 : 1]; }}},
      axes: [runAxis(d.runs, widthOf(el)), bytesAxis("bytes")],
      hooks: Object.assign(legendAtLast(d.runs.length), {draw: [markFlips(d.flips)]}),
    };
    return new uPlot(opts, [indices(d.runs.length), d.peak, d.residual], el);
  }

  // ---------------------------------------------------------------- the history section
  function historyPlots() {
    var holder = document.getElementById("history-data");
    var h = holder ? JSON.parse(holder.dataset.values) : null;
    if (!h || h.runs.length < 2) return;
    var xs = indices(h.runs.length), range = {time: false, range: [-0.3, h.runs.length - 0.7]};
    var el = document.getElementById("plot-pass-rate");
    var backends = Object.keys(h.rates);
    var flipsPerRun = xs.map(function (i) { return h.regressions[i] ? "regression" : h.fixes[i] ? "fix" : ""; });
    var rate = new uPlot({
      width: widthOf(el), height: 280,
      series: [{label: "run", value: function (u, v) { return v === null ? "" : h.runs[v]; }}].concat(backends.map(function (b, i) {
        return {label: b, stroke: PALETTE[i % PALETTE.length], width: 2, points: {size: 7}, spanGaps: true,
                value: function (u, v) { return v === null ? "" : (100 * v).toFixed(1) + "%"; }};
      })),
      scales: {x: range, y: {range: [0, 1.05]}},
      axes: [runAxis(h.runs, widthOf(el)), axis("pass rate", {size: 60, values: function (u, s) { return s.map(function (v) { return Math.round(100 * v) + "%"; }); }})],
      hooks: Object.assign(legendAtLast(h.runs.length), {draw: [markFlips(flipsPerRun)]}),
    }, [xs].concat(backends.map(function (b) { return h.rates[b]; })), el);
    el.dataset.series = backends.length;
    window.conformanceCharts.passRate = rate;

    el = document.getElementById("plot-flips");
    // Two bars per run side by side, both counted up from 0 on a whole-number axis (0, 1, 2 ...): a fix
    // and a regression never read as the same tick.
    var count = function (u, v) { return v === null ? "" : v + (v === 1 ? " pair" : " pairs"); };
    var most = Math.max.apply(null, h.fixes.concat(h.regressions).concat([1]));
    var flips = new uPlot({
      width: widthOf(el), height: 200,
      series: [{label: "run", value: function (u, v) { return v === null ? "" : h.runs[v]; }},
               {label: "regressions (as expected → unexpected)", stroke: "#c62828", fill: "rgba(198,40,40,.55)",
                paths: uPlot.paths.bars({size: [0.3, 30], align: -1}), points: {show: false}, value: count},
               {label: "fixes (unexpected → as expected)", stroke: "#2e7d32", fill: "rgba(46,125,50,.55)",
                paths: uPlot.paths.bars({size: [0.3, 30], align: 1}), points: {show: false}, value: count}],
      scales: {x: range, y: {range: [0, Math.ceil(most * 1.15) || 1]}},
      axes: [runAxis(h.runs, widthOf(el)), axis("pairs", {size: 50, incrs: COUNT_INCRS,
             values: function (u, s) { return s.map(function (v) { return String(v); }); }})],
      hooks: legendAtLast(h.runs.length),
    }, [xs, h.regressions, h.fixes], el);
    el.dataset.series = 2;
    window.conformanceCharts.flips = flips;

    el = document.getElementById("plot-memory");
    if (el && h.moved.length) {
      var series = [{label: "run", value: function (u, v) { return v === null ? "" : h.runs[v]; }}], cols = [xs];
      h.moved.forEach(function (m, i) {
        var c = PALETTE[i % PALETTE.length];
        series.push({label: m.pair + " peak", stroke: c, width: 2, points: {size: 6}, spanGaps: true,
                     value: function (u, v) { return fmtBytes(v); }});
        series.push({label: m.pair + " residual", stroke: c, width: 1.5, dash: [6, 3], points: {size: 5}, spanGaps: true,
                     value: function (u, v) { return fmtBytes(v); }});
        cols.push(m.peak, m.residual);
      });
      window.conformanceCharts.memory = new uPlot({
        width: widthOf(el), height: 300, series: series,
        scales: {x: range, y: {range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; }}},
        axes: [runAxis(h.runs, widthOf(el)), bytesAxis("measured bytes")],
        hooks: legendAtLast(h.runs.length),
      }, cols, el);
      el.dataset.series = series.length - 1;
    }
  }

  function drawPanel() {
    var t = detail.querySelector('[data-plot="timeline"]');
    if (t) window.conformanceCharts.timeline = timeline(t);
    var p = detail.querySelector('[data-plot="pair-trend"]');
    if (p) window.conformanceCharts.pairTrend = pairTrend(p);
  }

  var current = null;
  function open(cell) {
    var tpl = document.getElementById("detail-" + cell.dataset.index);
    detail.replaceChildren(tpl.content.cloneNode(true));
    detail.dataset.case = cell.dataset.case;
    detail.dataset.backend = cell.dataset.backend;
    detail.dataset.status = cell.dataset.status;
    cells.forEach(function (c) { c.classList.toggle("selected", c === cell); });
    current = cell;
    drawPanel();
    if (window.history && history.replaceState) {
      history.replaceState(null, "", "#" + encodeURIComponent(cell.dataset.case + "@" + cell.dataset.backend));
    }
  }

  function close() {
    detail.innerHTML = placeholder;
    delete detail.dataset.case; delete detail.dataset.backend; delete detail.dataset.status;
    cells.forEach(function (c) { c.classList.remove("selected"); });
    document.body.classList.remove("wide-detail");
    current = null;
  }

  function byKey(key) {
    return cells.filter(function (c) { return c.dataset.case + "@" + c.dataset.backend === key; })[0];
  }

  matrix.addEventListener("click", function (ev) {
    var cell = ev.target.closest("td.cell");
    if (cell) open(cell);
  });
  matrix.addEventListener("keydown", function (ev) {
    var cell = ev.target.closest("td.cell");
    if (cell && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); open(cell); }
  });
  detail.addEventListener("click", function (ev) {
    var action = ev.target.dataset && ev.target.dataset.action;
    if (action === "close") close();
    if (action === "widen") {  // full-width detail view, right under the answer; the charts redrawn at its width
      document.body.classList.toggle("wide-detail");
      fitMatrix();
      if (current) open(current);
      detail.scrollIntoView({block: "start"});
    }
    if (action === "more-blamed") {
      detail.querySelectorAll('#blamed [data-more="true"]').forEach(function (el) { el.hidden = false; });
      ev.target.remove();
    }
  });
  var list = document.getElementById("answer");
  list.addEventListener("click", function (ev) {  // the unexpected pairs at the top open their panel
    var a = ev.target.closest("a[data-index]");
    if (!a) return;
    ev.preventDefault();
    var cell = byKey(a.closest("li").dataset.case + "@" + a.closest("li").dataset.backend);
    if (cell) { open(cell); cell.scrollIntoView({block: "nearest"}); }
  });

  var fBackend = document.getElementById("filter-backend");
  var fFamily = document.getElementById("filter-family");
  var fStatus = document.getElementById("filter-status");

  function matches(cell, status) {
    if (!status) return true;
    if (status === "failing") return cell.dataset.failing === "true";
    return cell.dataset.status === status;
  }

  function apply() {
    var b = fBackend.value, f = fFamily.value, s = fStatus.value, shown = 0;
    matrix.querySelectorAll("[data-backend]").forEach(function (el) {
      el.hidden = !!b && el.dataset.backend !== b;
    });
    matrix.querySelectorAll("tbody tr").forEach(function (row) {
      var visible = row.querySelectorAll("td.cell");
      var any = false;
      visible.forEach(function (cell) {
        var inColumn = !b || cell.dataset.backend === b;
        var ok = matches(cell, s);
        cell.classList.toggle("dim", !ok);
        if (inColumn && ok) any = true;
      });
      var rowShown = (!f || row.dataset.family === f) && (any || (!s && !visible.length));
      row.hidden = !rowShown;
      if (rowShown) shown += 1;
    });
    document.getElementById("visible-count").textContent = shown + " of " + matrix.tBodies[0].rows.length + " cases shown";
    fitMatrix();
  }
  // Backend headers lie flat where the matrix fits its card, and stand upright where it would not: a name never
  // wraps ("iree-/boxed") and no column is scrolled out of view.
  function fitMatrix() {
    var wrap = document.getElementById("matrix-wrap");
    matrix.classList.remove("tight");
    if (wrap.scrollWidth > wrap.clientWidth) matrix.classList.add("tight");
  }
  window.addEventListener("resize", fitMatrix);
  [fBackend, fFamily, fStatus].forEach(function (el) { el.addEventListener("change", apply); });
  apply();

  // The op coverage table (the op sweep's): rows filtered by op name (substring, any case), verdict and backend;
  // a verdict badge opens its pair's panel, as the matrix's cell does.
  var opTable = document.getElementById("op-coverage-table");
  if (opTable) {
    var opName = document.getElementById("op-filter-name");
    var opVerdict = document.getElementById("op-filter-verdict");
    var opBackend = document.getElementById("op-filter-backend");  // only where the table has several
    var opRows = Array.prototype.slice.call(opTable.tBodies[0].rows);
    var opVerdictMatches = function (row, v) {
      if (!v) return true;
      var statuses = row.dataset.statuses.split(" ");
      if (v === "not-pass") return statuses.some(function (st) { return st !== "pass"; });
      return statuses.indexOf(v) >= 0;
    };
    var applyOps = function () {
      var name = opName.value.trim().toLowerCase(), v = opVerdict.value, b = opBackend ? opBackend.value : "";
      var shown = 0;
      opRows.forEach(function (row) {
        var ok = row.dataset.op.toLowerCase().indexOf(name) >= 0 && opVerdictMatches(row, v) &&
          (!b || row.dataset.backend === b);
        row.hidden = !ok;
        if (ok) shown += 1;
      });
      var count = document.getElementById("op-visible-count");
      count.textContent = shown + " of " + opRows.length + " rows shown";
      count.dataset.shown = shown;
      document.getElementById("op-none-shown").hidden = shown > 0;
    };
    opName.addEventListener("input", applyOps);
    opVerdict.addEventListener("change", applyOps);
    if (opBackend) opBackend.addEventListener("change", applyOps);
    opTable.addEventListener("click", function (ev) {
      var a = ev.target.closest("a[data-case]");
      var cell = a && byKey(a.dataset.case + "@" + a.dataset.backend);
      if (!cell) return;
      ev.preventDefault();
      open(cell);
      detail.scrollIntoView({block: "nearest"});
    });
    applyOps();
  }
  historyPlots();

  // #CASE@BACKEND opens that pair: on load, and when the fragment changes on the open page (a pasted link, a
  // link in the page, the back button).  open() rewrites the fragment with replaceState, which fires no event.
  function openFromHash() {
    if (location.hash.length <= 1) return;
    var hit = byKey(decodeURIComponent(location.hash.slice(1)));
    if (hit && hit !== current) { open(hit); hit.scrollIntoView({block: "nearest"}); }
  }
  window.addEventListener("hashchange", openFromHash);
  openFromHash();
})();

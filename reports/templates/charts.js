/* leakreport: interactive charts over the vendored uPlot. Hover shows time and values,
   drag zooms the time axis, double-click resets. Each chart replaces its static SVG when
   it comes near the viewport; without JavaScript the SVG stays. */
(function () {
  "use strict";
  var charts = [];
  var GIB = 1024;
  function clock(t, secs) {
    var d = new Date(t * 1000);
    function p(n) { return (n < 10 ? "0" : "") + n; }
    return d.getUTCFullYear() + "-" + p(d.getUTCMonth() + 1) + "-" + p(d.getUTCDate()) + " " +
      p(d.getUTCHours()) + ":" + p(d.getUTCMinutes()) + (secs ? ":" + p(d.getUTCSeconds()) : "") + " UTC";
  }
  // time ticks: whole seconds at least (a zoom of seconds labels each tick apart)
  var TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
    43200, 86400, 172800, 604800];
  var MIB_STEPS = [16, 32, 64, 128, 256, 512, 1024, 2048, 2560, 5120, 10240, 20480, 25600, 51200, 102400];
  function gib(v) { return v == null ? "—" : (v / GIB).toFixed(2) + " GiB"; }
  function pct(v) { return v == null ? "—" : v.toFixed(1) + " %"; }

  function tables(d) {
    var ts = d.s.map(function (s) {
      return [s.t.map(function (t) { return t + d.x0; }), s.v];
    });
    ts.push([[d.x0 + d.x[0], d.x0 + d.x[1]], [null, null]]); // the projection's room
    return uPlot.join(ts);
  }

  function draw(d) {
    return function (u) {
      var ctx = u.ctx, b = u.bbox, r = devicePixelRatio || 1;
      function X(t) { return u.valToPos(t + d.x0, "x", true); }
      function Y(v) { return u.valToPos(v, "mib", true); }
      ctx.save();
      ctx.beginPath(); ctx.rect(b.left, b.top, b.width, b.height); ctx.clip();
      ctx.lineWidth = 2 * r;
      d.trend.forEach(function (l) {
        ctx.strokeStyle = "#7a2e0e"; ctx.setLineDash([6 * r, 3 * r]);
        ctx.beginPath(); ctx.moveTo(X(l[0]), Y(l[1])); ctx.lineTo(X(l[2]), Y(l[3])); ctx.stroke();
      });
      if (d.proj) {
        ctx.strokeStyle = "#b42318"; ctx.setLineDash([3 * r, 3 * r]);
        ctx.beginPath(); ctx.moveTo(X(d.proj[0]), Y(d.proj[1])); ctx.lineTo(X(d.proj[2]), Y(d.proj[3])); ctx.stroke();
      }
      ctx.setLineDash([4 * r, 4 * r]); ctx.lineWidth = 1 * r;
      d.thr.forEach(function (h) {
        ctx.strokeStyle = h[1] === "limit" ? "#101828" : (h[1] === "90 %" ? "#b42318" : "#b54708");
        ctx.beginPath(); ctx.moveTo(b.left, Y(h[0])); ctx.lineTo(b.left + b.width, Y(h[0])); ctx.stroke();
      });
      ctx.setLineDash([]);
      d.mk.forEach(function (m) {
        ctx.strokeStyle = m[2]; ctx.lineWidth = 1.5 * r;
        if (m[4].length) {
          m[4].forEach(function (t) {
            ctx.beginPath(); ctx.moveTo(X(t), b.top); ctx.lineTo(X(t), b.top + 8 * r); ctx.stroke();
          });
        } else {
          ctx.beginPath(); ctx.moveTo(X(m[0]), b.top); ctx.lineTo(X(m[0]), b.top + b.height); ctx.stroke();
        }
      });
      ctx.restore();
      // labels in their lanes above the plot (lane 0 nearest), never over the data
      ctx.save();
      ctx.font = (11 * r) + "px system-ui, sans-serif"; ctx.textBaseline = "bottom";
      d.mk.forEach(function (m) {
        if (m[3] == null) return;
        var x = X(m[0]), w = ctx.measureText(m[1]).width + 8 * r;
        if (x < b.left || x > b.left + b.width) return;
        ctx.fillStyle = m[2];
        ctx.fillText(m[1], Math.min(x, b.left + b.width - w) + 2 * r, b.top - (4 + m[3] * 13) * r);
      });
      ctx.restore();
    };
  }

  function idle(d) {
    return function (u) {
      var ctx = u.ctx, b = u.bbox;
      ctx.save(); ctx.fillStyle = "rgba(178,221,255,0.45)";
      d.idle.forEach(function (w) {
        var a = Math.max(u.valToPos(w[0] + d.x0, "x", true), b.left);
        var e = Math.min(u.valToPos(w[1] + d.x0, "x", true), b.left + b.width);
        if (e > a) ctx.fillRect(a, b.top, e - a, b.height);
      });
      ctx.restore();
    };
  }

  function make(fig) {
    if (fig.dataset.live) return;
    fig.dataset.live = "1";
    var d = JSON.parse(fig.querySelector("script.chart-data").textContent);
    var hasKv = d.s.some(function (s) { return s.k === "kv"; });
    var series = [{ label: "time", value: function (u, v) { return v == null ? "—" : clock(v); } }];
    d.s.forEach(function (s) {
      series.push({
        label: s.n, stroke: s.c, width: s.w, scale: s.k, spanGaps: true,
        dash: s.d ? [4, 3] : undefined, value: function (u, v) { return s.k === "kv" ? pct(v) : gib(v); }
      });
    });
    series.push({ label: "", show: false, scale: "mib" });
    var axes = [
      { space: 80, incrs: TIME_STEPS, values: function (u, vs) {
        // zoomed into minutes, ticks a few seconds apart: with seconds, or they repeat
        var span = u.scales.x.max - u.scales.x.min, days = span > 2 * 86400, secs = span < 600;
        return vs.map(function (v) {
          var c = clock(v, secs);
          return days ? c.slice(5, 16) : secs ? c.slice(11, 19) : c.slice(11, 16);
        });
      } },
      { scale: "mib", label: "GiB used", incrs: MIB_STEPS, size: 64,
        values: function (u, vs) { return vs.map(function (v) { return +(v / GIB).toFixed(3); }); } }
    ];
    if (hasKv) axes.push({ scale: "kv", side: 1, label: "KV %", grid: { show: false } });
    var opts = {
      width: Math.max(fig.clientWidth, 320), height: 300, series: series, axes: axes,
      padding: [3 * 13 + 8, 8, 0, 0],
      scales: {
        x: { time: true },
        mib: { range: function () { return [d.y[0], d.y[1]]; } },
        kv: { range: [0, 100] }
      },
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { live: true },
      hooks: { drawAxes: [idle(d)], draw: [draw(d)] },
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); }
    };
    if (d.band) opts.bands = [{ series: [d.band[0] + 1, d.band[1] + 1], fill: "rgba(46,144,250,0.18)" }];
    var holder = document.createElement("div");
    holder.className = "live";
    fig.appendChild(holder);
    var u = new uPlot(opts, tables(d), holder);
    fig.classList.add("js");
    charts.push({ id: fig.id, plot: u, x0: d.x0 });
  }

  function initAll() { document.querySelectorAll("figure.chart").forEach(make); }
  var resizing = 0;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () {
      charts.forEach(function (c) {
        var fig = document.getElementById(c.id);
        if (fig) c.plot.setSize({ width: Math.max(fig.clientWidth, 320), height: 300 });
      });
    }, 150);
  });
  window.leakreport = { charts: charts, initAll: initAll };
  function start() {
    var figs = document.querySelectorAll("figure.chart");
    if (!("IntersectionObserver" in window)) { initAll(); return; }
    var io = new IntersectionObserver(function (es) {
      es.forEach(function (e) { if (e.isIntersecting) { make(e.target); io.unobserve(e.target); } });
    }, { rootMargin: "400px 0px" });
    figs.forEach(function (f) { io.observe(f); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();


(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("leaderboard-data").textContent);
  var sections = Array.prototype.slice.call(document.querySelectorAll("section.board"));

  function node(name, attrs, text) {
    var el = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (key) { el.setAttribute(key, String(attrs[key])); });
    if (text !== undefined) { el.textContent = String(text); }
    return el;
  }

  function humanBytes(v) {
    var units = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (v >= units[i][1]) { return (v / units[i][1]).toFixed(1) + " " + units[i][0]; }
    }
    return v.toFixed(0) + " B";
  }

  function niceStep(span, count) {
    // the 1, 2 or 5 x 10^k step that cuts span into about count intervals
    var raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }

  var BYTE_UNITS = [["B", 1], ["KiB", 1024], ["MiB", 1048576], ["GiB", 1073741824]];

  function byteTicks(x0, x1) {
    // the round sizes whose log10 lies in [x0, x1] (1, 2, 5, 10 ... 500 B, KiB, MiB, GiB;
    // every integer mantissa where those give fewer than two; only 1, 10, 100 past eight)
    var ticks = [];
    [[1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]].some(function (mantissas) {
      ticks = [];
      BYTE_UNITS.forEach(function (unit) {
        [1, 10, 100].forEach(function (decade) {
          mantissas.forEach(function (m) {
            var t = Math.log10(m * decade * unit[1]);
            if (t >= x0 && t <= x1) { ticks.push({t: t, text: m * decade + " " + unit[0]}); }
          });
        });
      });
      return ticks.length >= 2;
    });
    if (ticks.length > 8) {
      ticks = ticks.filter(function (k) { return /^10* /.test(k.text); });
    }
    return ticks;
  }

  function sortTable(table, index, th) {
    // the first click puts the best first (a metric's own direction; A-Z for text), a
    // second click on the same column reverses; the arrow always shows the order shown
    var current = th.getAttribute("aria-sort");
    var ascending;
    if (current === "ascending") { ascending = false; }
    else if (current === "descending") { ascending = true; }
    else { ascending = th.getAttribute("data-better") !== "high"; }
    table.querySelectorAll("thead th").forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var numeric = th.getAttribute("data-type") === "num";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[index].getAttribute("data-sort");
      var y = b.cells[index].getAttribute("data-sort");
      var order;
      if (x === "" || y === "") {
        order = (x === "") - (y === "");  // missing values last, either way
      } else {
        if (numeric) {
          var fx = parseFloat(x), fy = parseFloat(y);
          order = fx < fy ? -1 : fx > fy ? 1 : 0;
        } else {
          order = x < y ? -1 : x > y ? 1 : 0;
        }
        if (!ascending) { order = -order; }
      }
      return order || (Number(a.getAttribute("data-rank")) - Number(b.getAttribute("data-rank")));
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  document.querySelectorAll("table.board-table").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, index) {
      th.querySelector("button").addEventListener("click", function () {
        sortTable(table, index, th);
      });
    });
  });

  function drawChart(chart) {
    var svg = document.getElementById("chart-" + chart.id);
    if (!svg) { return; }
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var points = chart.points.filter(function (p) {
      var row = document.getElementById(p.row);
      return row && !row.hidden && p.memory > 0;
    });
    // drawn at the width it is shown at (one SVG unit = one CSS pixel), so its text keeps
    // its CSS size on a phone as on a desktop; narrower than 480 px it is taller than wide
    var W = Math.max(280, Math.round(svg.getBoundingClientRect().width) || 640);
    var H = W < 480 ? Math.round(W * 0.95) : Math.max(320, Math.round(W / 2));
    var L = W < 480 ? 54 : 72, R = 16, T = 16, B = 44;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.appendChild(node("line", {"class": "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}));
    svg.appendChild(node("line", {"class": "axis", x1: L, y1: T, x2: L, y2: H - B}));
    svg.appendChild(node("text", {x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle"},
                         chart.memory + " (log scale)"));
    svg.appendChild(node("text", {x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
                                  transform: "rotate(-90 12 " + ((T + H - B) / 2) + ")"},
                         chart.quality));
    if (!points.length) {
      svg.appendChild(node("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no entries"));
      return;
    }
    var lx = points.map(function (p) { return Math.log10(p.memory); });
    var lows = points.map(function (p) { return Math.min(p.quality, p.ci_low); });
    var highs = points.map(function (p) { return Math.max(p.quality, p.ci_high); });
    var x0 = Math.min.apply(null, lx), x1 = Math.max.apply(null, lx);
    var y0 = Math.min.apply(null, lows), y1 = Math.max.apply(null, highs);
    // at least half a decade wide, so that two round sizes fall inside it
    if (x1 - x0 < 0.5) { var mid = (x0 + x1) / 2; x0 = mid - 0.25; x1 = mid + 0.25; }
    if (y1 - y0 < 1e-3) { y0 -= 5e-4; y1 += 5e-4; }
    var padX = (x1 - x0) * 0.08, padY = (y1 - y0) * 0.05;
    x0 -= padX; x1 += padX; y0 -= padY; y1 += padY;
    // round y ticks (1, 2 or 5 x 10^k apart), the axis widened to the ticks around the data
    var step = niceStep(y1 - y0, 4);
    var first = Math.floor(y0 / step), last = Math.ceil(y1 / step);
    y0 = first * step; y1 = last * step;
    var places = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    function sx(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
    function sy(v) { return H - B - (v - y0) / (y1 - y0) * (H - B - T); }
    var at = spread(points, sx, sy, L + 6, W - R - 6);
    byteTicks(x0, x1).forEach(function (k) {
      svg.appendChild(node("line", {"class": "grid", x1: sx(k.t), y1: T, x2: sx(k.t), y2: H - B}));
      svg.appendChild(node("text", {"class": "tick x", x: sx(k.t), y: H - B + 14,
                                    "text-anchor": "middle"}, k.text));
    });
    for (var k = first; k <= last; k++) {
      var v = k * step;
      svg.appendChild(node("line", {"class": "grid", x1: L, y1: sy(v), x2: W - R, y2: sy(v)}));
      svg.appendChild(node("text", {"class": "tick y", x: L - 6, y: sy(v) + 4,
                                    "text-anchor": "end"}, v.toFixed(places)));
    }
    var sign = chart.higher_is_better ? 1 : -1;
    var byMemory = points.slice().sort(function (a, b) {
      return a.memory - b.memory || sign * (b.quality - a.quality);
    });
    var front = [], best = -Infinity;
    byMemory.forEach(function (p) {
      if (sign * p.quality > best) { best = sign * p.quality; front.push(p); }
    });
    var path = front.map(function (p) {
      return at[p.row].toFixed(1) + "," + sy(p.quality).toFixed(1);
    }).join(" ");
    svg.appendChild(node("polyline", {"class": "front", points: path}));
    var drawn = [];
    points.forEach(function (p) {
      var g = node("g", {"class": "entry", "data-row": p.row, "data-label": p.label});
      var cx = at[p.row], cy = sy(p.quality);
      // the CI over the seeds (chart.level): a vertical bar with caps
      var lo = sy(p.ci_low), hi = sy(p.ci_high);
      [[cx, lo, cx, hi], [cx - 4, lo, cx + 4, lo], [cx - 4, hi, cx + 4, hi]].forEach(function (s) {
        g.appendChild(node("line", {"class": "errorbar", x1: s[0].toFixed(1), y1: s[1].toFixed(1),
                                    x2: s[2].toFixed(1), y2: s[3].toFixed(1)}));
      });
      var dot = node("circle", {"class": p.verified ? "point" : "point unverified",
                                cx: cx.toFixed(1), cy: cy.toFixed(1), r: 5});
      dot.appendChild(node("title", {}, p.label + " by " + p.submitter +
                           (p.verified ? "" : " (" + p.status + ")") + ": " + chart.quality +
                           " " + p.quality.toFixed(4) + " (" + chart.level + " CI " + p.ci_low.toFixed(4) +
                           " to " + p.ci_high.toFixed(4) + "), " + humanBytes(p.memory)));
      g.appendChild(dot);
      svg.appendChild(g);
      drawn.push([g, p.label, cx, cy]);
    });
    // labels last, clear of every marker and of the labels placed before them
    var placed = drawn.map(function (d) { return {x: d[2] - 5, y: d[3] - 5, width: 10, height: 10}; });
    drawn.forEach(function (d) {
      var mine = {x: d[2] - 5, y: d[3] - 5, width: 10, height: 10};
      var others = placed.filter(function (b) {
        return !(b.x === mine.x && b.y === mine.y);
      });
      var box = placeLabel(svg, d[0], d[1], d[2], d[3], others, [L, T, W - R, H - B]);
      if (box) { placed.push(box); }
    });
  }

  var GAP = 11;  // px between the centres of points moved apart (markers are 10 px wide)

  function spread(points, sx, sy, lo, hi) {
    // each point's x: at its memory, unless its marker or CI bar would run into one
    // already placed (equal memory, as hash and QR at one budget: the same x, overlapping
    // heights); then it moves GAP px right, left, 2 GAP right ... to the nearest free
    // place, so each marker and its bar stays its own. Points far apart in height keep
    // their x, and none leaves the plot (lo to hi px). Placed in order of memory, then
    // label.
    var order = points.slice().sort(function (a, b) {
      return a.memory - b.memory || (a.label < b.label ? -1 : a.label > b.label ? 1 :
                                     a.row < b.row ? -1 : 1);
    });
    var at = {}, placed = [];
    order.forEach(function (p) {
      var x = Math.min(hi, Math.max(lo, sx(Math.log10(p.memory))));
      var top = Math.min(sy(p.ci_high), sy(p.quality)) - 6;
      var bottom = Math.max(sy(p.ci_low), sy(p.quality)) + 6;
      var y = sy(p.quality);
      function clear(shift, barsToo) {
        return placed.every(function (q) {
          if (Math.abs(q.x - (x + shift)) >= GAP) { return true; }
          // markers only, where the plot is too crowded for every bar to stand apart
          return barsToo ? q.bottom <= top || bottom <= q.top : Math.abs(q.y - y) >= GAP;
        });
      }
      var chosen = null;
      [true, false].some(function (barsToo) {
        for (var k = 0; k < 400; k++) {
          var shift = (k % 2 ? 1 : -1) * Math.ceil(k / 2) * GAP;
          if (x + shift < lo || x + shift > hi) { continue; }
          if (clear(shift, barsToo)) { chosen = shift; return true; }
        }
        return false;
      });
      chosen = chosen === null ? 0 : chosen;
      at[p.row] = x + chosen;
      placed.push({x: x + chosen, y: y, top: top, bottom: bottom});
    });
    return at;
  }

  function overlaps(a, b) {
    return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  }

  function placeLabel(svg, g, text, cx, cy, placed, bounds) {
    // the label beside its point where it overlaps no other label or marker and stays
    // inside the plot: above right, above left, below right, below left; else none (the
    // point's tooltip still names it)
    var spots = [[8, -8, "start"], [-8, -8, "end"], [8, 16, "start"], [-8, 16, "end"]];
    for (var i = 0; i < spots.length; i++) {
      var s = spots[i];
      var label = node("text", {"class": "label", x: (cx + s[0]).toFixed(1),
                                y: (cy + s[1]).toFixed(1), "text-anchor": s[2]}, text);
      g.appendChild(label);
      var box = label.getBBox();
      var inside = box.x >= bounds[0] && box.y >= bounds[1] &&
                   box.x + box.width <= bounds[2] && box.y + box.height <= bounds[3] + 14;
      var free = placed.every(function (b) { return !overlaps(box, b); });
      if (inside && free) { return box; }
      g.removeChild(label);
    }
    return null;
  }

  var filters = {
    dataset: document.getElementById("filter-dataset"),
    task: document.getElementById("filter-task"),
    method: document.getElementById("filter-method"),
    text: document.getElementById("filter-text")
  };

  function applyFilters() {
    var dataset = filters.dataset.value, task = filters.task.value;
    var method = filters.method.value, text = filters.text.value.trim().toLowerCase();
    var shown = 0;
    sections.forEach(function (section) {
      var sectionOk = (!dataset || section.getAttribute("data-dataset") === dataset) &&
                      (!task || section.getAttribute("data-task") === task);
      var visible = 0;
      section.querySelectorAll("tbody tr").forEach(function (row) {
        var ok = sectionOk && (!method || row.getAttribute("data-method") === method) &&
                 (!text || row.getAttribute("data-search").indexOf(text) !== -1);
        row.hidden = !ok;
        if (ok) { visible++; }
      });
      section.hidden = visible === 0;
      shown += visible;
    });
    document.getElementById("no-match").hidden = shown !== 0;
    data.charts.forEach(drawChart);
  }

  var allColumns = document.getElementById("all-columns");
  allColumns.addEventListener("change", function () {
    document.body.classList.toggle("all-columns", allColumns.checked);
  });

  ["dataset", "task", "method"].forEach(function (key) {
    filters[key].addEventListener("change", applyFilters);
  });
  filters.text.addEventListener("input", applyFilters);
  document.getElementById("filters").addEventListener("submit", function (event) {
    event.preventDefault();
  });
  applyFilters();

  var lastWidth = window.innerWidth, resizing = null;
  window.addEventListener("resize", function () {
    // the charts are drawn at their shown width: redraw when it changes
    if (window.innerWidth === lastWidth) { return; }
    lastWidth = window.innerWidth;
    clearTimeout(resizing);
    resizing = setTimeout(function () { data.charts.forEach(drawChart); }, 100);
  });

  function openFromHash() {
    // a link to #config-<entry> or #record-<entry> (the Markdown board's links) opens that
    // block and scrolls to it, clearing the filters first if they hide its row
    var id;
    try { id = decodeURIComponent(window.location.hash.slice(1)); } catch (e) { return; }
    var block = id ? document.getElementById(id) : null;
    if (!block || block.tagName !== "DETAILS") { return; }
    var row = block.closest("tr");
    if (row && row.hidden) {
      Object.keys(filters).forEach(function (key) { filters[key].value = ""; });
      applyFilters();
    }
    block.open = true;
    block.scrollIntoView({block: "start"});
  }

  window.addEventListener("hashchange", openFromHash);
  openFromHash();
})();

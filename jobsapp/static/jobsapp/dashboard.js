/* jobsapp dashboard: confirmations, select-all, jump to a job, and the overview's live charts.
 * Plain JS, no build step, no network beyond this dashboard's own stats.json. Charts are inline
 * SVG built with DOM calls (never innerHTML), so no job data is ever parsed as markup. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";

  function svg(name, attributes, parent) {
    var element = document.createElementNS(SVG, name);
    Object.keys(attributes || {}).forEach(function (key) { element.setAttribute(key, attributes[key]); });
    if (parent) { parent.appendChild(element); }
    return element;
  }

  function formatNumber(value) {
    if (value % 1 !== 0 && value < 10) { return value.toFixed(1); }
    return Math.round(value).toString().replace(/\B(?=(\d{3})+(?!\d))/g, "\u2009");
  }

  /* The smallest 1, 2 or 5 times a power of ten that is >= value: round axis labels. */
  function niceCeiling(value) {
    var power = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 5, 10];
    for (var index = 0; index < steps.length; index += 1) {
      if (steps[index] * power >= value) { return steps[index] * power; }
    }
    return 10 * power;
  }

  /* A line chart of several series over shared labels, scaled to the container's width. */
  function lineChart(container, labels, series) {
    while (container.firstChild) { container.removeChild(container.firstChild); }
    var width = Math.max(container.clientWidth || 600, 300), height = 180;
    var left = 48, right = 8, top = 8, bottom = 22;
    var root = svg("svg", { viewBox: "0 0 " + width + " " + height, width: "100%", height: height, "class": "chart-svg" }, container);
    var max = 0;
    series.forEach(function (one) { one.values.forEach(function (value) { if (value > max) { max = value; } }); });
    max = niceCeiling(Math.max(max, 4));
    var plotWidth = width - left - right, plotHeight = height - top - bottom;
    var step = labels.length > 1 ? plotWidth / (labels.length - 1) : plotWidth;
    function x(index) { return left + index * step; }
    function y(value) { return top + plotHeight - (value / max) * plotHeight; }
    [0, 0.5, 1].forEach(function (fraction) {
      var value = max * fraction;
      svg("line", { x1: left, x2: width - right, y1: y(value), y2: y(value), "class": "grid" }, root);
      svg("text", { x: left - 6, y: y(value) + 4, "text-anchor": "end", "class": "axis" }, root).textContent = formatNumber(value);
    });
    var every = Math.max(Math.ceil(labels.length / 8), 1);
    labels.forEach(function (label, index) {
      var last = index === labels.length - 1;
      if (last || (index % every === 0 && labels.length - 1 - index >= every / 2)) {
        var anchor = last && index > 0 ? "end" : (index === 0 ? "start" : "middle");
        svg("text", { x: x(index), y: height - 6, "text-anchor": anchor, "class": "axis" }, root).textContent = label;
      }
    });
    series.forEach(function (one) {
      var points = one.values.map(function (value, index) { return x(index) + "," + y(value); }).join(" ");
      svg("polyline", { points: points, "class": "series " + one.cls }, root);
      one.values.forEach(function (value, index) {
        var dot = svg("circle", { cx: x(index), cy: y(value), r: 2.5, "class": "dot " + one.cls }, root);
        svg("title", {}, dot).textContent = labels[index] + ": " + formatNumber(value) + " " + one.name;
      });
    });
  }

  function setupConfirmations() {
    document.addEventListener("click", function (event) {
      var button = event.target.closest("[data-confirm]");
      if (button && !window.confirm(button.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  }

  function setupSelectAll() {
    document.querySelectorAll("[data-select-all]").forEach(function (master) {
      master.addEventListener("change", function () {
        var table = master.closest("table");
        table.querySelectorAll("tbody input[type=checkbox]").forEach(function (box) { box.checked = master.checked; });
      });
    });
  }

  function setupJump() {
    var form = document.querySelector("form[data-job-jump]");
    if (!form) { return; }
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var jid = form.querySelector("input").value.trim();
      if (jid) { window.location.href = form.getAttribute("data-job-jump").replace("JID", encodeURIComponent(jid)); }
    });
  }

  function setupOverview() {
    var cards = document.getElementById("stat-cards");
    if (!cards) { return; }
    var history = JSON.parse(document.getElementById("history-data").textContent);
    var historyChart = document.getElementById("history-chart");
    function drawHistory() {
      lineChart(historyChart, history.map(function (row) { return row[0].slice(5); }), [
        { name: "processed", cls: "processed", values: history.map(function (row) { return row[1]; }) },
        { name: "failed", cls: "failed", values: history.map(function (row) { return row[2]; }) }
      ]);
    }
    drawHistory();

    var url = cards.getAttribute("data-stats-url");
    var seconds = parseInt(cards.getAttribute("data-poll-seconds"), 10) || 5;
    var previous = JSON.parse(document.getElementById("initial-stats").textContent);
    var labels = [], processed = [], failed = [];
    var realtime = document.getElementById("realtime-chart");
    var status = document.getElementById("live-status");
    var toggle = document.getElementById("live-toggle");
    var paused = false, timer = null;

    function drawRealtime() {
      lineChart(realtime, labels, [
        { name: "processed", cls: "processed", values: processed },
        { name: "failed", cls: "failed", values: failed }
      ]);
    }

    function update(stats) {
      cards.querySelectorAll("[data-stat]").forEach(function (element) {
        var name = element.getAttribute("data-stat");
        if (typeof stats[name] === "number") { element.textContent = formatNumber(stats[name]); }
      });
      var now = new Date(stats.time * 1000);
      labels.push(now.toISOString().slice(11, 19));
      processed.push(Math.max(stats.processed - previous.processed, 0));
      failed.push(Math.max(stats.failed - previous.failed, 0));
      if (labels.length > 60) { labels.shift(); processed.shift(); failed.shift(); }
      previous = stats;
      drawRealtime();
    }

    function poll() {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) {
          if (!response.ok) { throw new Error(response.status === 503 ? "Redis unavailable" : "HTTP " + response.status); }
          return response.json();
        })
        .then(function (stats) {
          update(stats);
          status.textContent = "Live: updated " + new Date().toLocaleTimeString();
          status.className = "";
        })
        .catch(function (error) { status.textContent = "Live: " + error.message; status.className = "stale"; })
        .then(function () { if (!paused) { timer = window.setTimeout(poll, seconds * 1000); } });
    }

    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "Resume" : "Pause";
      if (paused) { window.clearTimeout(timer); status.textContent = "Live: paused"; } else { poll(); }
    });
    window.addEventListener("resize", function () { drawHistory(); drawRealtime(); });
    drawRealtime();
    poll();
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupConfirmations();
    setupSelectAll();
    setupJump();
    setupOverview();
  });
})();

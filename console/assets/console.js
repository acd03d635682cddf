// TurbineSQL console: renders the page's data as plain DOM (text nodes,
// SVG text), then polls the page's JSON endpoint every two seconds.
"use strict";
(function () {
  var page = document.body.dataset.page;
  var api = document.body.dataset.api;
  var content = document.getElementById("content");
  var SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) {
      if (k === "text") e.textContent = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function num(n) { return (n === null || n === undefined) ? "" : Number(n).toLocaleString("en-US"); }
  function rate(r) { return (r || 0).toFixed(1) + "/s"; }
  function cell(v, cls) { var td = el("td", { text: v }); if (cls) td.className = cls; return td; }

  function table(heads, rows) {
    var thead = el("thead", {}, [el("tr", {}, heads.map(function (h) { return el("th", { text: h }); }))]);
    return el("table", {}, [thead, el("tbody", {}, rows)]);
  }

  function renderStreams(streams) {
    if (!streams || streams.length === 0) {
      return el("p", { class: "empty", text: "No streams yet: CREATE STREAM in psql, and it shows up here." });
    }
    var rows = streams.map(function (s) {
      var link = el("a", { href: "/topology?stream=" + encodeURIComponent(s.name), text: s.name, class: "stream-name" });
      var status = cell(s.status, "status-" + s.status.split(" ")[0].replace(":", ""));
      return el("tr", { "data-stream": s.name }, [
        el("td", {}, [link]), cell(s.input), el("td", { class: "topic", text: s.topic }), status, cell(s.strategy || ""),
        cell(s.watermark || ""), cell(num(s.lag_records), "num"), cell(rate(s.in_per_sec), "num"), cell(rate(s.out_per_sec), "num"),
        cell(num(s.records_in), "num"), cell(num(s.records_out), "num"), cell(num(s.late_rows), "num"),
        cell(num(s.dead_lettered), "num"), cell(num(s.skipped), "num"), el("td", { class: "error", text: s.error || "" })
      ]);
    });
    return table(["stream", "input", "output topic", "status", "strategy", "watermark", "lag (records)", "in", "out",
      "records in", "records out", "late rows", "dead-lettered", "skipped", "error"], rows);
  }

  // bars draws a hop's output per internal partition as an SVG bar chart;
  // a partition holding most of the output is marked hot.
  function bars(dist) {
    var max = 0, total = 0;
    dist.forEach(function (b) { max = Math.max(max, b.records); total += b.records; });
    var w = 36, h = 120, top = 16, bottom = 30;
    var chart = svg("svg", { class: "bars", width: Math.max(dist.length * w + 10, 120), height: h + top + bottom, role: "img" });
    chart.appendChild(svg("title", {}, "records out per internal partition"));
    dist.forEach(function (b, i) {
      var bh = max > 0 ? Math.round(h * b.records / max) : 0;
      var x = 5 + i * w, y = top + h - bh;
      var hot = total > 0 && dist.length > 1 && b.records / total > 2 / dist.length && b.records === max;
      var r = svg("rect", { class: "bar" + (hot ? " hot" : ""), x: x + 4, y: y, width: w - 8, height: bh, "data-partition": b.partition });
      r.appendChild(svg("title", {}, "partition " + b.partition + ": " + b.records + " records, " + b.bytes + " bytes"));
      chart.appendChild(r);
      chart.appendChild(svg("text", { x: x + w / 2, y: y - 3, "text-anchor": "middle", class: "bar-value" }, String(b.records)));
      chart.appendChild(svg("text", { x: x + w / 2, y: top + h + 14, "text-anchor": "middle", class: "bar-label" }, "p" + b.partition));
    });
    return chart;
  }

  function renderNode(n) {
    var kids = [el("h2", { text: n.title })];
    if (n.topic) kids.push(el("div", { class: "topic", text: n.topic }));
    var dl = el("dl");
    (n.stats || []).forEach(function (s) {
      dl.appendChild(el("dt", { text: s.name }));
      dl.appendChild(el("dd", { text: s.value }));
    });
    kids.push(dl);
    if (n.kind === "repartition" || n.kind === "combine") {
      var det = el("details", { open: "" }, [el("summary", { text: "internal topic and output distribution" }),
        el("div", {}, [el("span", { text: "internal topic: " }), el("span", { class: "topic internal-topic", text: n.topic })])]);
      if (n.distribution && n.distribution.length) det.appendChild(bars(n.distribution));
      kids.push(det);
      if (n.null_keys !== undefined && n.null_keys !== null) {
        kids.push(el("div", { class: "nullkeys" }, [el("span", { text: "null keys: " }), el("strong", { class: "null-keys", text: num(n.null_keys) })]));
      }
    }
    return el("section", { class: "node " + n.kind + (n.kind === "repartition" || n.kind === "combine" ? " hop" : ""), "data-kind": n.kind }, kids);
  }

  function renderTopology(t) {
    var flow = el("div", { class: "flow" });
    t.nodes.forEach(function (n, i) {
      if (i > 0) flow.appendChild(el("div", { class: "arrow", text: "→" }));
      flow.appendChild(renderNode(n));
    });
    return el("div", {}, [el("p", {}, [el("span", { text: "status: " }), el("strong", { text: t.status })]), flow]);
  }

  function renderPartitions(parts) {
    if (!parts || parts.length === 0) return el("p", { class: "empty", text: "No running stream reads any partition." });
    var rows = parts.map(function (p) {
      return el("tr", {}, [
        el("td", {}, [el("a", { href: "/topology?stream=" + encodeURIComponent(p.stream), text: p.stream })]),
        cell(p.stage), el("td", { class: "topic", text: p.topic }), cell(String(p.partition), "num"),
        cell(num(p.records_in), "num"), cell(num(p.lag_records), "num"), cell(num(p.open_groups), "num"),
        cell(num(p.key_groups), "num"), cell(p.placement), cell(p.node)
      ]);
    });
    return table(["stream", "stage", "topic", "partition", "records in", "lag (records)", "open groups",
      "key groups owned", "placement", "node"], rows);
  }

  // renderCluster: one row per live process of the app; the console of
  // another links to it through its HTTP address.
  function renderCluster(members) {
    if (!members || members.length === 0) return el("p", { class: "empty", text: "No heartbeat read yet from the control topic." });
    var rows = members.map(function (m) {
      var node = m.http_addr && !m.this ? el("a", { href: "http://" + m.http_addr + "/cluster", text: m.node }) : el("span", { text: m.node });
      return el("tr", { "data-node": m.node, class: m.this ? "this-node" : "" }, [
        el("td", {}, [node]), cell(m.pg_addr), cell(m.http_addr || ""), cell(num(m.tasks_owned), "num"),
        cell(num(m.tasks_standby), "num"), cell(m.state + (m.this ? " (this node)" : ""))
      ]);
    });
    return table(["node", "pgwire", "http", "tasks owned", "tasks in standby", "state"], rows);
  }

  var render = { streams: renderStreams, topology: renderTopology, partitions: renderPartitions, cluster: renderCluster }[page];

  function show(data) {
    if (!render) return;
    content.replaceChildren(render(data));
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  show(window.TURBINE_DATA);
  if (render && api) {
    setInterval(function () {
      fetch(api, { cache: "no-store" }).then(function (r) {
        if (!r.ok) throw new Error(r.status + " " + r.statusText);
        return r.json();
      }).then(show, function (err) {
        document.getElementById("updated").textContent = "cannot reach the server: " + err.message;
      });
    }, 2000);
  }
})();

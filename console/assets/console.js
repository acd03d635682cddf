// TurbineSQL console: renders the page's data as plain DOM (text nodes,
// SVG text), then polls the page's JSON endpoint every two seconds. The
// charts are SVG drawn here: nothing is loaded from the network.
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
  // num is a count with thousands separators; whole is a lag (records or
  // seconds) as the plain whole number the server sends.
  function num(n) { return (n === null || n === undefined) ? "" : Number(n).toLocaleString("en-US"); }
  function whole(n) { return (n === null || n === undefined) ? "" : String(Math.round(Number(n))); }
  function rate(r) { return (r || 0).toFixed(1) + "/s"; }
  function cell(v, cls) { var td = el("td", { text: v }); if (cls) td.className = cls; return td; }
  function streamHref(name) { return "/topology?stream=" + encodeURIComponent(name); }
  function statusClass(status) { return "status status-" + status.split(" ")[0].replace(":", ""); }

  function table(heads, rows, cls) {
    // A column of numbers has its heading over its right edge, as they are.
    var first = rows.length ? rows[0].cells : [];
    var thead = el("thead", {}, [el("tr", {}, heads.map(function (h, i) {
      return el("th", first[i] && first[i].classList.contains("num") ? { text: h, class: "num" } : { text: h });
    }))]);
    // The wrapper scrolls a table wider than a narrow window, instead of
    // the page.
    return el("div", { class: "scroll" }, [el("table", cls ? { class: cls } : {}, [thead, el("tbody", {}, rows)])]);
  }

  // renderStreams: one row per stream, narrow enough for a 1,280 px
  // window; a stream's error gets a row of its own under it, across the
  // table, where a long message wraps instead of widening the table.
  function renderStreams(streams) {
    if (!streams || streams.length === 0) {
      return el("p", { class: "empty", text: "No streams yet: CREATE STREAM in psql, and it shows up here." });
    }
    var heads = ["stream", "status", "strategy", "watermark", "lag (records)", "in", "out",
      "records in", "records out", "late rows", "dead-lettered", "skipped"];
    var rows = [];
    streams.forEach(function (s) {
      var name = el("td", { class: "name" }, [
        el("a", { href: streamHref(s.name), text: s.name, class: "stream-name" }),
        el("div", { class: "sub" }, [el("span", { text: (s.input || "?") + " → " }), el("span", { class: "topic", text: s.topic || "?" })])]);
      rows.push(el("tr", { "data-stream": s.name, class: s.error ? "has-error" : "" }, [
        name, cell(s.status, statusClass(s.status)), cell(s.strategy || ""),
        cell(s.watermark || "", "time"), cell(whole(s.lag_records), "num lag"), cell(rate(s.in_per_sec), "num"), cell(rate(s.out_per_sec), "num"),
        cell(num(s.records_in), "num"), cell(num(s.records_out), "num"), cell(num(s.late_rows), "num"),
        cell(num(s.dead_lettered), "num"), cell(num(s.skipped), "num")
      ]));
      if (s.error) {
        rows.push(el("tr", { class: "error-row", "data-error-of": s.name }, [
          el("td", { colspan: String(heads.length) }, [el("span", { class: "error-label", text: "error: " }), el("span", { class: "error", text: s.error })])]));
      }
    });
    return table(heads, rows, "streams");
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
    var title = n.link ? el("a", { href: n.link, text: n.title }) : el("span", { text: n.title });
    var kids = [el("h2", { class: "node-title" }, [title])];
    if (n.topic) kids.push(el("div", { class: "topic", text: n.topic + (n.partitions ? " (" + n.partitions + (n.partitions === 1 ? " partition)" : " partitions)") : "") }));
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

  function clock(ms) {
    var d = new Date(ms);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map(function (x) { return (x < 10 ? "0" : "") + x; }).join(":");
  }
  function short(v) {
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(0) + "k";
    return String(Math.round(v * 10) / 10);
  }

  // lineChart draws one series of a stream's history: time across, the
  // value up from zero, a gap where a sample has no value (a rate has
  // none at the first sample or across a restart). data-samples counts
  // the drawn points.
  function lineChart(key, label, history, fmt) {
    var W = 340, H = 140, L = 46, R = 10, T = 10, B = 24;
    var pts = history.filter(function (p) { return p[key] !== null && p[key] !== undefined; });
    var chart = svg("svg", { class: "chart", width: W, height: H, role: "img", "data-series": key, "data-samples": String(pts.length) });
    chart.appendChild(svg("title", {}, label + " over the last minutes"));
    var box = el("figure", { class: "chart-box" }, [el("figcaption", {}, [el("span", { text: label }),
      el("strong", { class: "chart-last", text: pts.length ? fmt(pts[pts.length - 1][key]) : "—" })]), chart]);
    chart.appendChild(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
    chart.appendChild(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
    if (history.length === 0) {
      chart.appendChild(svg("text", { x: (L + W - R) / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" }, "no samples yet"));
      return box;
    }
    var t0 = history[0].t, t1 = history[history.length - 1].t, span = Math.max(t1 - t0, 1);
    var max = 0;
    pts.forEach(function (p) { max = Math.max(max, p[key]); });
    if (max === 0) max = 1;
    var x = function (t) { return L + (W - L - R) * (history.length === 1 ? 1 : (t - t0) / span); };
    var y = function (v) { return T + (H - T - B) * (1 - v / max); };
    chart.appendChild(svg("text", { x: L - 4, y: T + 4, "text-anchor": "end", class: "tick" }, short(max)));
    chart.appendChild(svg("text", { x: L - 4, y: H - B, "text-anchor": "end", class: "tick" }, "0"));
    chart.appendChild(svg("text", { x: L, y: H - 6, "text-anchor": "start", class: "tick" }, clock(t0)));
    chart.appendChild(svg("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "tick" }, clock(t1)));
    var d = "", pen = "M";
    history.forEach(function (p) {
      var v = p[key];
      if (v === null || v === undefined) { pen = "M"; return; }
      d += pen + x(p.t).toFixed(1) + " " + y(v).toFixed(1) + " ";
      pen = "L";
    });
    if (d) chart.appendChild(svg("path", { class: "line", d: d }));
    pts.forEach(function (p) {
      var c = svg("circle", { class: "dot", cx: x(p.t).toFixed(1), cy: y(p[key]).toFixed(1), r: pts.length > 60 ? 1.2 : 2.2 });
      c.appendChild(svg("title", {}, clock(p.t) + ": " + fmt(p[key])));
      chart.appendChild(c);
    });
    return box;
  }

  function renderCharts(t) {
    var h = t.history || [];
    var every = t.history_every ? " every " + t.history_every + " s" : "";
    return el("section", { class: "charts-section" }, [
      el("h2", { text: "Last minutes" }),
      el("p", { class: "sub", text: h.length + " samples" + every + ", kept in memory by this node (15 minutes)" }),
      el("div", { class: "charts" }, [
        lineChart("in_per_sec", "records in/s", h, function (v) { return v.toFixed(1) + "/s"; }),
        lineChart("out_per_sec", "records out/s", h, function (v) { return v.toFixed(1) + "/s"; }),
        lineChart("lag", "lag (records)", h, whole),
        lineChart("late_rows", "late rows (total)", h, num),
        lineChart("dead_lettered", "dead letters (total)", h, num)
      ])]);
  }

  // renderTopology is a stream's page: what it is, its graph, its last
  // minutes, its SQL and its plan.
  function renderTopology(t) {
    var head = el("div", { class: "summary" }, [
      el("p", {}, [el("span", { text: "status: " }), el("strong", { class: "stream-status " + statusClass(t.status), text: t.status }),
        el("span", { class: "sep", text: "·" }), el("span", { text: "guarantee: " }), el("strong", { class: "guarantee", text: t.guarantee || "" })]),
      t.strategy ? el("p", { class: "strategy" }, [el("span", { text: "strategy: " }), el("strong", { class: "strategy-name", text: t.strategy }),
        el("span", { class: "reason", text: " (" + t.reason + ")" })]) : el("p", { class: "empty", text: "not running: its plan is made when it starts" })
    ]);
    if (t.error) head.appendChild(el("div", { class: "error-box" }, [el("span", { class: "error-label", text: "error: " }), el("span", { class: "error", text: t.error })]));
    var flow = el("div", { class: "flow" });
    t.nodes.forEach(function (n, i) {
      if (i > 0) flow.appendChild(el("div", { class: "arrow", text: "→" }));
      flow.appendChild(renderNode(n));
    });
    var kids = [head, flow, renderCharts(t),
      el("section", {}, [el("h2", { text: "SQL" }), el("pre", { class: "sql", text: t.sql })])];
    if (t.plan && t.plan.length) {
      kids.push(el("section", {}, [el("h2", { text: "Plan (EXPLAIN)" }), el("pre", { class: "plan", text: t.plan.join("\n") })]));
    }
    return el("div", {}, kids);
  }

  // renderSources: each source with its schema, its partitions and what
  // they hold, its rates, its placement and the streams reading it.
  function renderSources(sources) {
    if (!sources || sources.length === 0) {
      return el("p", { class: "empty", text: "No sources yet: CREATE SOURCE in psql, and it shows up here." });
    }
    return el("div", {}, sources.map(function (s) {
      var facts = el("dl", { class: "facts" });
      function fact(name, value, cls) {
        if (value === "" || value === undefined || value === null) return;
        facts.appendChild(el("dt", { text: name }));
        facts.appendChild(value instanceof Node ? el("dd", {}, [value]) : el("dd", { text: value, class: cls || "" }));
      }
      fact("topic", s.topic, "topic");
      fact("format", s.format);
      fact("on_error", s.on_error + (s.on_error === "dlq" && s.dlq_topic ? " → dead-letter topic " + s.dlq_topic : ""));
      fact("watermark", s.watermark);
      fact("partitions", String((s.partitions || []).length), "source-partitions");
      fact("records", num(s.records), "num");
      fact("rate", rate(s.in_per_sec), "source-rate");
      fact("event time", s.event_rate);
      fact("placement", s.placement, "placement");
      var readers = el("span", {});
      (s.streams || []).forEach(function (n, i) {
        if (i > 0) readers.appendChild(document.createTextNode(", "));
        readers.appendChild(el("a", { href: streamHref(n), text: n }));
      });
      fact("read by", (s.streams || []).length ? readers : "no stream");
      var cols = table(["column", "type", "detail"], (s.columns || []).map(function (c) {
        return el("tr", {}, [cell(c.name, "column-name"), cell(c.type), cell(c.detail || "", "wrap")]);
      }), "columns");
      var parts = table(["partition", "records", "placement"], (s.partitions || []).map(function (p) {
        return el("tr", { "data-partition": p.partition }, [cell(String(p.partition), "num"), cell(num(p.records), "num"), cell(p.placement, "wrap")]);
      }), "partitions");
      var kids = [el("h2", {}, [el("span", { text: "source " }), el("span", { class: "source-name", text: s.name })]), facts];
      if (s.error) kids.push(el("div", { class: "error-box" }, [el("span", { class: "error", text: s.error })]));
      kids.push(el("div", { class: "pair" }, [el("div", {}, [el("h3", { text: "Schema" }), cols]), el("div", {}, [el("h3", { text: "Partitions" }), parts])]));
      return el("section", { class: "source", id: "source-" + s.name, "data-source": s.name }, kids);
    }));
  }

  function renderPartitions(parts) {
    if (!parts || parts.length === 0) return el("p", { class: "empty", text: "No running stream reads any partition on this node." });
    var rows = parts.map(function (p) {
      return el("tr", {}, [
        el("td", {}, [el("a", { href: streamHref(p.stream), text: p.stream })]),
        cell(p.stage), el("td", { class: "topic", text: p.topic }), cell(String(p.partition), "num"),
        cell(num(p.records_in), "num"), cell(whole(p.lag_records), "num lag"), cell(num(p.open_groups), "num"),
        cell(num(p.key_groups), "num"), cell(p.placement, "wrap"), cell(p.node, "node-id")
      ]);
    });
    return el("div", {}, [
      el("p", { class: "sub", text: "The partitions whose tasks run on this node; the Cluster page links to the others' consoles." }),
      table(["stream", "stage", "topic", "partition", "records in", "lag (records)", "open groups",
        "key groups owned", "placement", "node"], rows)]);
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

  var render = { streams: renderStreams, topology: renderTopology, sources: renderSources, partitions: renderPartitions, cluster: renderCluster }[page];

  function show(data) {
    if (!render) return;
    // Keep the reader's place: a poll re-renders the page, and a <details>
    // the reader closed stays closed.
    var closed = Array.from(content.querySelectorAll("details:not([open])")).length > 0;
    content.replaceChildren(render(data));
    if (closed) content.querySelectorAll("details").forEach(function (d) { d.removeAttribute("open"); });
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  show(window.TURBINE_DATA);
  if (page === "sources" && location.hash) {
    var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target) target.scrollIntoView();
  }
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

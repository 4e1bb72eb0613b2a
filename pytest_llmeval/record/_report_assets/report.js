/* pytest-llmeval report: the item browser. Reads the JSON block #llmeval-data and builds
   the DOM with createElement/textContent only (record text is untrusted). */
(function () {
  "use strict";
  var PAGE = 50;
  var STATUS = [["all", "all"], ["correct", "correct"], ["wrong", "wrong"], ["unscored", "not scored"], ["error", "error"]];
  var FLIPS = [["", "all items"], ["any", "flipped either way"],
    ["regressed", "correct \u2192 wrong"], ["improved", "wrong \u2192 correct"]];
  // A task compared on partial scores (F1, MC2): its flips are items that scored lower or
  // higher than in the baseline, not right and wrong.
  var FLIPS_SCORED = [["", "all items"], ["any", "scored lower or higher"],
    ["regressed", "scored lower"], ["improved", "scored higher"]];
  function flipWords(task, fl, short) {
    if (task.flips_scored) {
      return fl === "regressed" ? (short ? "scored lower" : "scored lower than in the baseline") :
        (short ? "scored higher" : "scored higher than in the baseline");
    }
    return fl === "regressed" ? (short ? "was correct" : "correct in the baseline, wrong now") :
      (short ? "was wrong" : "wrong in the baseline, correct now");
  }
  var data = JSON.parse(document.getElementById("llmeval-data").textContent);
  var root = document.getElementById("browser");
  var state = fresh(0);
  var timer = null;

  function fresh(task) {
    return { task: task, status: "all", cls: "", flip: "", subset: "", query: "", page: 0, open: null };
  }

  function el(tag, props, children) {
    var e = document.createElement(tag);
    if (props) {
      Object.keys(props).forEach(function (k) {
        var v = props[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "text") e.textContent = v;
        else if (k === "cls") e.className = v;
        else e.setAttribute(k, v === true ? "" : String(v));
      });
    }
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }

  function statusOf(it) {
    if (it.st === "not_scored") return "unscored";
    if (it.st === "error") return "error";
    return it.ok ? "correct" : "wrong";
  }

  function words(s) { return String(s).replace(/_/g, " "); }

  function clip(s, n) {
    s = String(s).replace(/\s+/g, " ").trim();
    return s.length > n ? s.slice(0, n - 1) + "\u2026" : s;
  }

  function haystack(task, i) {
    if (!task.hay) task.hay = [];
    var h = task.hay[i];
    if (h === undefined) {
      var it = task.items[i];
      h = [it.id, it.q, it.o || "", it.x || "", it.t].join("\n").toLowerCase();
      task.hay[i] = h;
    }
    return h;
  }

  function filtered(task) {
    var out = [];
    var q = state.query.toLowerCase();
    for (var i = 0; i < task.items.length; i++) {
      var it = task.items[i];
      if (state.status !== "all" && statusOf(it) !== state.status) continue;
      if (state.cls && it.fc !== state.cls) continue;
      if (state.flip === "any" && !it.fl) continue;
      if (state.flip && state.flip !== "any" && it.fl !== state.flip) continue;
      if (state.subset !== "" && String(it.s) !== state.subset) continue;
      if (q && haystack(task, i).indexOf(q) < 0) continue;
      out.push(i);
    }
    return out;
  }

  function counts(task) {
    var c = { all: task.items.length, correct: 0, wrong: 0, unscored: 0, error: 0, cls: {} };
    task.items.forEach(function (it) {
      c[statusOf(it)] += 1;
      if (it.fc) c.cls[it.fc] = (c.cls[it.fc] || 0) + 1;
    });
    return c;
  }

  function option(value, label, selected) {
    return el("option", { value: value, selected: selected, text: label });
  }

  function controls(task) {
    var c = counts(task);
    var bar = el("div", { cls: "filters", role: "group", "aria-label": "filters" });
    STATUS.forEach(function (s) {
      if (s[0] === "unscored" && !c.unscored) return;
      if (s[0] === "error" && !c.error) return;
      var b = el("button", { type: "button", "data-status": s[0], "aria-pressed": state.status === s[0] ? "true" : "false",
        text: s[1] + " (" + c[s[0]] + ")" });
      b.addEventListener("click", function () { state.status = s[0]; state.page = 0; render(); });
      bar.appendChild(b);
    });
    if (task.classes.length) {
      var sel = el("select", { "aria-label": "failure class", "data-filter": "class" },
        [option("", "any failure class", state.cls === "")].concat(task.classes.map(function (k) {
          return option(k, words(k) + " (" + (c.cls[k] || 0) + ")", state.cls === k);
        })));
      sel.addEventListener("change", function () { state.cls = sel.value; state.page = 0; render(); });
      bar.appendChild(sel);
    }
    if (task.flips) {
      var fsel = el("select", { "aria-label": "flipped against the baseline", "data-filter": "flip" },
        (task.flips_scored ? FLIPS_SCORED : FLIPS).map(function (f) { return option(f[0], f[1], state.flip === f[0]); }));
      fsel.addEventListener("change", function () { state.flip = fsel.value; state.page = 0; render(); });
      bar.appendChild(fsel);
    }
    if (task.subsets.length > 1) {
      var ssel = el("select", { "aria-label": "subset", "data-filter": "subset" },
        [option("", "all subsets (" + task.subsets.length + ")", state.subset === "")].concat(
          task.subsets.map(function (name, k) { return option(String(k), name, state.subset === String(k)); })));
      ssel.addEventListener("change", function () { state.subset = ssel.value; state.page = 0; render(); });
      bar.appendChild(ssel);
    }
    var search = el("input", { type: "search", placeholder: "search id, question, output, answer",
      "aria-label": "search", value: state.query, "data-filter": "search" });
    search.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { state.query = search.value; state.page = 0; render(true); }, 150);
    });
    bar.appendChild(search);
    return bar;
  }

  function probabilities(lps) {
    var finite = lps.filter(function (x) { return x !== null; });
    if (!finite.length) return lps.map(function () { return null; });
    var top = Math.max.apply(null, finite);
    var w = lps.map(function (x) { return x === null ? 0 : Math.exp(x - top); });
    var sum = w.reduce(function (a, b) { return a + b; }, 0);
    return w.map(function (x, k) { return lps[k] === null ? null : x / sum; });
  }

  function choiceChart(it) {
    var probs = probabilities(it.lp || []);
    var grid = el("div", { cls: "choices" });
    it.ch.forEach(function (choice, k) {
      var p = probs[k];
      var label = el("span", { cls: "ch" + (k === it.g ? " gold" : ""), title: k === it.g ? "the right choice" : null,
        text: (k === it.g ? "\u2713 " : "") + clip(choice, 90) });
      var fill = el("div", { cls: "fill" + (k === it.pr ? " pred" : "") });
      fill.style.width = p === null ? "0" : (100 * p).toFixed(1) + "%";
      var track = el("div", { cls: "track", title: k === it.pr ? "the model's choice" : null }, [fill]);
      var lp = it.lp ? it.lp[k] : null;
      var val = el("span", { cls: "val", text: (p === null || p === undefined ? "n/a" : (100 * p).toFixed(1) + "%") +
        "  (ll " + (lp === null || lp === undefined ? "n/a" : lp.toFixed(4)) + ")" + (k === it.pr ? "  \u25c0 chosen" : "") });
      grid.appendChild(label); grid.appendChild(track); grid.appendChild(val);
    });
    return grid;
  }

  function facts(pairs) {
    var dl = el("dl");
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || p[1] === "") return;
      dl.appendChild(el("dt", { text: p[0] }));
      dl.appendChild(el("dd", null, [p[1] instanceof Node ? p[1] : String(p[1])]));
    });
    return dl;
  }

  function namedMetrics(nm) {
    // the spec's named metrics beside the primary score: GSM8K's strict_match, flexible_extract
    var list = el("ul", { cls: "named-metrics" });
    nm.forEach(function (m) {
      var mark = m[1] === 1 ? "\u2713 " : m[1] === 0 ? "\u2717 " : "";
      list.appendChild(el("li", { "data-metric": m[0] }, [
        el("span", { cls: "metric-name", text: mark + m[0] }),
        " score " + (m[1] === null ? "n/a" : m[1]) + ", extracted ", code(m[2])]));
    });
    return list;
  }

  function code(s) { return el("code", { text: s === null || s === undefined ? "(none)" : String(s) }); }

  function body(task, it) {
    var box = el("div", { cls: "body" });
    var status = statusOf(it);
    box.appendChild(facts([
      ["result", status === "unscored" ? "not scored (the prompt does not fit the context window)" :
        status === "error" ? "error: not evaluated (" + it.er + ")" :
        (it.ok ? "correct" : "wrong") + (it.sc !== undefined ? " (score " + it.sc + ")" : "")],
      ["failure class", it.fc ? words(it.fc) : null],
      ["vs baseline", it.fl ? flipWords(task, it.fl, false) : null],
      ["subset", it.s !== undefined ? task.subsets[it.s] : null],
      ["extracted answer", it.ch ? null : code(it.x)],
      ["model's choice", it.ch && it.pr !== undefined ? code(it.ch[it.pr]) : null],
      ["target", code(it.t)],
      ["extractor", it.xr],
      ["finish reason", it.fr],
      ["output tokens", it.nt],
      ["acc_norm choice", it.ch && it.pn !== undefined && it.pn !== it.pr ? code(it.ch[it.pn]) : null],
      ["metrics", it.nm ? namedMetrics(it.nm) : null],
      ["repeat scores", it.rs ? it.rs.join(", ") : null],
      ["determinism", it.de],
      ["reused from", it.ru]
    ]));
    var prompt = (it.pf !== undefined ? task.prefixes[it.pf].t : "") + it.q;
    box.appendChild(el("h4", { text: "prompt (" + prompt.length + " characters)" }));
    if (it.pf !== undefined) {
      var pre = task.prefixes[it.pf];
      box.appendChild(el("details", { cls: "fewshot" }, [
        el("summary", { text: (pre.lb || "description and few-shot block: " + pre.ids.length + " example(s) (" +
          clip(pre.ids.join(", "), 120) + ")") + ", " + pre.t.length + " characters" }),
        el("pre", { cls: "prefix", text: pre.t })]));
    }
    box.appendChild(el("pre", { cls: "prompt", text: it.q }));
    if (it.ch) {
      box.appendChild(el("h4", { text: "choices: probability normalised over the choices (log-likelihood)" }));
      box.appendChild(choiceChart(it));
    }
    if (it.o !== undefined) {
      box.appendChild(el("h4", { text: "raw output (" + it.o.length + " characters)" }));
      box.appendChild(el("pre", { cls: "output", text: it.o === "" ? "(empty)" : it.o }));
    }
    if (it.d) {
      box.appendChild(el("h4", { text: "scorer details" }));
      box.appendChild(el("pre", { cls: "details", text: it.d }));
    }
    return box;
  }

  function summaryLine(task, it) {
    var status = statusOf(it);
    var mark = status === "correct" ? ["ok", "\u2713"] : status === "wrong" ? ["bad", "\u2717"] : ["skip", "\u2013"];
    var answer = it.ch ? (it.pr !== undefined ? it.ch[it.pr] : "?") : (it.x === undefined || it.x === null ? "(none)" : it.x);
    var kids = [
      el("span", { cls: "mark " + mark[0], title: status, text: mark[1] }),
      el("span", { cls: "iid", text: it.id }),
      it.s !== undefined && task.subsets.length > 1 ? el("span", { cls: "tag", text: task.subsets[it.s] }) : null,
      it.fc ? el("span", { cls: "tag", text: words(it.fc) }) : null,
      it.fl ? el("span", { cls: "tag flip", text: flipWords(task, it.fl, true) }) : null,
      el("small", { text: "answer " + clip(answer, 50) + " \u00b7 target " + clip(it.t, 50) })
    ];
    return el("summary", null, kids);
  }

  function itemNode(task, i) {
    var it = task.items[i];
    var node = el("details", { cls: "item", "data-id": it.id, "data-status": statusOf(it) }, [summaryLine(task, it)]);
    node.addEventListener("toggle", function () {
      if (node.open && !node.querySelector(".body")) node.appendChild(body(task, it));
    });
    return node;
  }

  function render(keepFocus) {
    var task = data.tasks[state.task];
    var focused = keepFocus && document.activeElement ? document.activeElement.getAttribute("data-filter") : null;
    while (root.firstChild) root.removeChild(root.firstChild);
    if (!data.tasks.length) {
      root.appendChild(el("p", { cls: "absent", text: "No item records in this run." }));
      return;
    }
    var tabs = el("div", { cls: "tabs", role: "tablist" });
    data.tasks.forEach(function (t, k) {
      var b = el("button", { type: "button", role: "tab", "data-task": t.name, "aria-pressed": k === state.task ? "true" : "false",
        text: t.name + " (" + t.items.length + ")" });
      b.addEventListener("click", function () { state = fresh(k); render(); });
      tabs.appendChild(b);
    });
    root.appendChild(tabs);
    root.appendChild(controls(task));
    var rows = filtered(task);
    var pages = Math.max(1, Math.ceil(rows.length / PAGE));
    if (state.open !== null) {
      for (var r = 0; r < rows.length; r++) {
        if (task.items[rows[r]].id === state.open) { state.page = Math.floor(r / PAGE); break; }
      }
    }
    state.page = Math.min(state.page, pages - 1);
    var first = state.page * PAGE;
    var shown = rows.slice(first, first + PAGE);
    root.appendChild(el("p", { cls: "count", "data-count": rows.length, text: rows.length ?
      "items " + (first + 1) + "\u2013" + (first + shown.length) + " of " + rows.length +
      (rows.length < task.items.length ? " matching (" + task.items.length + " in this task)" : "") :
      "no item matches (" + task.items.length + " in this task)" }));
    var list = el("div", { cls: "list" });
    var target = null;
    shown.forEach(function (i) {
      var node = itemNode(task, i);
      if (state.open !== null && task.items[i].id === state.open) {
        node.appendChild(body(task, task.items[i]));
        node.open = true;
        target = node;
      }
      list.appendChild(node);
    });
    root.appendChild(list);
    if (pages > 1) root.appendChild(pager(pages));
    if (target) target.scrollIntoView();
    state.open = null;
    if (focused) {
      var again = root.querySelector("[data-filter='" + focused + "']");
      if (again) { again.focus(); if (again.setSelectionRange) again.setSelectionRange(again.value.length, again.value.length); }
    }
  }

  function pager(pages) {
    var prev = el("button", { type: "button", "data-page": "prev", disabled: state.page === 0, text: "\u2190 previous" });
    var next = el("button", { type: "button", "data-page": "next", disabled: state.page >= pages - 1, text: "next \u2192" });
    prev.addEventListener("click", function () { state.page -= 1; render(); root.scrollIntoView(); });
    next.addEventListener("click", function () { state.page += 1; render(); root.scrollIntoView(); });
    return el("div", { cls: "pager" }, [prev, el("span", { text: "page " + (state.page + 1) + " of " + pages }), next]);
  }

  function taskIndex(name) {
    for (var k = 0; k < data.tasks.length; k++) if (data.tasks[k].name === name) return k;
    return -1;
  }

  function route() {
    var h = location.hash.slice(1);
    var parts = h.split("/").map(function (p) { try { return decodeURIComponent(p); } catch (e) { return p; } });
    if (["items", "item", "flipped"].indexOf(parts[0]) < 0 || parts.length < 2) return false;
    var k = taskIndex(parts[1]);
    if (k < 0) return false;
    state = fresh(k);
    if (parts[0] === "item" && parts.length > 2) state.open = parts.slice(2).join("/");
    if (parts[0] === "flipped" && parts.length > 2) state.flip = parts[2];
    render();
    if (parts[0] !== "item") document.getElementById("items").scrollIntoView();
    return true;
  }

  window.addEventListener("hashchange", route);
  if (!route()) render();
  document.documentElement.setAttribute("data-ready", "1");
  window.llmevalReady = performance.now();
})();

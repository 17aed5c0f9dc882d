// Knotless pages: live run logs (server-sent events resuming by byte
// offset), ANSI colours, "load earlier", live Pipelines tab, confirmations.
// Log text only ever becomes DOM text (textContent), never markup.
"use strict";

(function () {
  // ---- ANSI SGR → classes; every other control sequence is dropped and
  // other control characters are shown as their Unicode pictures.
  var CSI = /\x1b\[([0-9;:?<=>]*)([ -\/]*)([@-~])|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b[ -\/]*[0-~]?/g;

  function newStyle() { return { fg: null, bg: null, bold: false, dim: false, italic: false, under: false, fgRGB: null, bgRGB: null }; }

  function xterm256(n) {
    if (n < 16) return null;
    if (n >= 232) { var g = 8 + (n - 232) * 10; return "rgb(" + g + "," + g + "," + g + ")"; }
    n -= 16;
    var c = [0, 95, 135, 175, 215, 255];
    return "rgb(" + c[Math.floor(n / 36)] + "," + c[Math.floor(n / 6) % 6] + "," + c[n % 6] + ")";
  }

  function applySGR(st, params) {
    var p = params === "" ? [0] : params.split(/[;:]/).map(function (x) { return x === "" ? 0 : parseInt(x, 10); });
    for (var i = 0; i < p.length; i++) {
      var n = p[i];
      if (n === 0) { var f = newStyle(); for (var k in f) st[k] = f[k]; }
      else if (n === 1) st.bold = true;
      else if (n === 2) st.dim = true;
      else if (n === 3) st.italic = true;
      else if (n === 4) st.under = true;
      else if (n === 22) { st.bold = false; st.dim = false; }
      else if (n === 23) st.italic = false;
      else if (n === 24) st.under = false;
      else if (n >= 30 && n <= 37) { st.fg = n - 30; st.fgRGB = null; }
      else if (n >= 90 && n <= 97) { st.fg = n - 90 + 8; st.fgRGB = null; }
      else if (n === 39) { st.fg = null; st.fgRGB = null; }
      else if (n >= 40 && n <= 47) { st.bg = n - 40; st.bgRGB = null; }
      else if (n >= 100 && n <= 107) { st.bg = n - 100 + 8; st.bgRGB = null; }
      else if (n === 49) { st.bg = null; st.bgRGB = null; }
      else if ((n === 38 || n === 48) && p[i + 1] === 5) {
        var v = p[i + 2] | 0, rgb = xterm256(v);
        if (n === 38) { st.fg = v < 16 ? v : null; st.fgRGB = rgb; } else { st.bg = v < 16 ? v : null; st.bgRGB = rgb; }
        i += 2;
      } else if ((n === 38 || n === 48) && p[i + 1] === 2) {
        var c = "rgb(" + (p[i + 2] & 255) + "," + (p[i + 3] & 255) + "," + (p[i + 4] & 255) + ")";
        if (n === 38) { st.fg = null; st.fgRGB = c; } else { st.bg = null; st.bgRGB = c; }
        i += 4;
      }
    }
  }

  function visibleControls(s) {
    return s.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, function (c) {
      return c === "\x7f" ? "\u2421" : String.fromCharCode(0x2400 + c.charCodeAt(0));
    });
  }

  // Characters that are not shown for what they are (the server's
  // api.IsHiddenRune: C1 controls, format characters such as
  // bidirectional overrides and isolates and zero-width characters, line
  // and paragraph separators) are shown as their escape (\u202e), in an
  // element of class "esc", so that no log line displays as another.
  var HIDDEN = /[\u0080-\u009f\p{Cf}\p{Zl}\p{Zp}]/gu;

  function escapeRune(cp) {
    var h = cp.toString(16);
    return cp > 0xffff ? "\\U" + ("00000000" + h).slice(-8) : "\\u" + ("0000" + h).slice(-4);
  }

  // appendText appends text to el: C0 controls as their pictures, hidden
  // characters escaped.
  function appendText(el, text) {
    var last = 0, m;
    HIDDEN.lastIndex = 0;
    while ((m = HIDDEN.exec(text)) !== null) {
      if (m.index > last) el.appendChild(document.createTextNode(visibleControls(text.slice(last, m.index))));
      var cp = m[0].codePointAt(0);
      var esc = document.createElement("span");
      esc.className = "esc";
      esc.title = "U+" + ("0000" + cp.toString(16).toUpperCase()).slice(-Math.max(4, cp.toString(16).length));
      esc.textContent = escapeRune(cp);
      el.appendChild(esc);
      last = HIDDEN.lastIndex;
    }
    if (last < text.length) el.appendChild(document.createTextNode(visibleControls(text.slice(last))));
  }

  function span(st, text) {
    var el = document.createElement("span");
    var cls = [];
    if (st.fg !== null) cls.push("f" + st.fg);
    if (st.bg !== null) cls.push("b" + st.bg);
    if (st.bold) cls.push("bo");
    if (st.dim) cls.push("di");
    if (st.italic) cls.push("it");
    if (st.under) cls.push("un");
    if (cls.length) el.className = cls.join(" ");
    if (st.fgRGB) el.style.color = st.fgRGB;
    if (st.bgRGB) el.style.backgroundColor = st.bgRGB;
    appendText(el, text);
    return el;
  }

  // renderInto appends text (one line's worth, no newline) to el in style st.
  function renderInto(el, st, text) {
    var last = 0, m;
    CSI.lastIndex = 0;
    while ((m = CSI.exec(text)) !== null) {
      if (m.index > last) el.appendChild(span(st, text.slice(last, m.index)));
      if (m[3] === "m" && m[2] === "" && !/[?<=>]/.test(m[1] || "")) applySGR(st, m[1]);
      last = CSI.lastIndex;
      if (m[0] === "") CSI.lastIndex++;
    }
    if (last < text.length) el.appendChild(span(st, text.slice(last)));
  }

  // ---- a step's log
  function StepLog(section, run) {
    this.section = section;
    this.index = parseInt(section.dataset.step, 10);
    this.start = parseInt(section.dataset.start, 10) || 0;
    this.run = run;
    this.box = section.querySelector(".log");
    this.style = newStyle();
    this.open = null;   // the last line when it has no newline yet
    this.openText = "";
    this.lineNo = this.start === 0 ? 1 : null;
    this.times = []; // [offset, Unix ms] pairs, ascending: when the runner saw lines begin
    var self = this;
    var earlier = section.querySelector(".earlier");
    if (earlier) earlier.addEventListener("click", function () { self.loadEarlier(earlier); });
    var fold = section.querySelector(".fold");
    if (fold) fold.addEventListener("click", function () {
      var open = fold.getAttribute("aria-expanded") === "true";
      fold.setAttribute("aria-expanded", open ? "false" : "true");
      self.box.hidden = open;
    });
  }

  function pad(n, w) { return ("000" + n).slice(-(w || 2)); }

  // mergeTimes adds an event's line times ([offset, ms] pairs, ascending).
  StepLog.prototype.mergeTimes = function (ts) {
    if (!ts || !ts.length) return;
    var all = this.times.concat(ts).sort(function (a, b) { return a[0] - b[0]; });
    this.times = all.filter(function (t, i) { return i === 0 || t[0] !== all[i - 1][0]; });
  };

  // timeAt is the time of the line starting at byte off: the last line
  // time at or before it (null when none).
  StepLog.prototype.timeAt = function (off) {
    var lo = 0, hi = this.times.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (this.times[mid][0] <= off) lo = mid + 1; else hi = mid; }
    return lo === 0 ? null : this.times[lo - 1][1];
  };

  StepLog.prototype.lineElement = function (off, num) {
    var line = document.createElement("div");
    line.className = "l";
    line.id = "L" + this.index + "-" + off;
    var a = document.createElement("a");
    a.className = "n";
    a.href = "#" + line.id;
    a.textContent = num === null ? "\u00b7" : String(num);
    a.setAttribute("aria-label", "link to this line");
    line.appendChild(a);
    var ts = document.createElement("span");
    ts.className = "ts";
    var ms = this.timeAt(off);
    if (ms !== null) {
      var d = new Date(ms);
      ts.textContent = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3);
      ts.title = d.toISOString() + " (when the runner saw the line begin)";
      ts.dataset.ms = String(ms);
    }
    line.appendChild(ts);
    var t = document.createElement("span");
    t.className = "t";
    line.appendChild(t);
    return line;
  };

  // build returns a fragment of the lines of text, which starts at byte off
  // and at a line's start (the open line, if any, is continued by append).
  StepLog.prototype.build = function (text, off, style, numFrom, frag, cont) {
    var enc = new TextEncoder();
    var parts = text.split("\n");
    var num = numFrom;
    var lines = [];
    for (var i = 0; i < parts.length; i++) {
      var part = parts[i];
      var last = i === parts.length - 1;
      if (last && part === "") break;
      var el, full;
      if (i === 0 && cont) { el = cont.el; full = cont.text + part; el.lastChild.textContent = ""; }
      else { el = this.lineElement(off, num); if (num !== null) num++; full = part; frag.appendChild(el); }
      var shown = full.replace(/\r$/, "");
      var cr = shown.lastIndexOf("\r");
      if (cr >= 0) shown = shown.slice(cr + 1);
      var st = cont && i === 0 ? cont.style : style;
      renderInto(el.lastChild, st, shown);
      lines.push({ el: el, text: full, last: last });
      off += enc.encode(part).length + 1;
    }
    return { lines: lines, num: num };
  };

  StepLog.prototype.append = function (ev) {
    var frag = document.createDocumentFragment();
    var cont = null;
    if (this.open) {
      cont = { el: this.open, text: this.openText, style: this.openStyle };
    }
    var styleBefore = JSON.parse(JSON.stringify(this.style));
    this.mergeTimes(ev.times);
    var res = this.build(ev.text, ev.off, this.style, this.lineNo, frag, cont);
    this.lineNo = res.num;
    var tail = res.lines.length ? res.lines[res.lines.length - 1] : null;
    if (tail && tail.last && !ev.text.endsWith("\n")) {
      this.open = tail.el; this.openText = tail.text; this.openStyle = styleBefore;
    } else {
      this.open = null; this.openText = "";
    }
    var follow = this.run.following();
    this.box.appendChild(frag);
    if (follow) window.scrollTo(0, document.body.scrollHeight);
    this.run.scrollToHash();
  };

  StepLog.prototype.loadEarlier = function (btn) {
    var self = this;
    btn.disabled = true;
    fetch("/-/runs/" + this.run.id + "/log/" + this.index + "?before=" + this.start, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (ev) {
        self.mergeTimes(ev.times);
        var frag = document.createDocumentFragment();
        self.build(ev.text, ev.off, newStyle(), ev.off === 0 ? 1 : null, frag, null);
        if (ev.off === 0 && self.lineNo === null) self.renumber(frag);
        self.box.insertBefore(frag, self.box.firstChild);
        self.start = ev.off;
        btn.disabled = false;
        btn.hidden = ev.off === 0;
      })
      .catch(function () { btn.disabled = false; });
  };

  // renumber numbers every line once the log's start is loaded.
  StepLog.prototype.renumber = function (frag) {
    var n = 1;
    var all = Array.prototype.slice.call(frag.childNodes).concat(Array.prototype.slice.call(this.box.childNodes));
    all.forEach(function (l) { if (l.firstChild) l.firstChild.textContent = String(n++); });
    this.lineNo = n;
  };

  // ---- the run page
  function RunPage(root) {
    this.root = root;
    this.id = root.dataset.run;
    // A run still going is followed to the end of its log; one that had
    // ended when the page opened opens at its top (state, message,
    // steps), where a reader starts.
    this.live = root.dataset.final !== "true";
    this.steps = {};
    var self = this;
    root.querySelectorAll("section.step").forEach(function (s) { self.steps[s.dataset.step] = new StepLog(s, self); });
    var times = document.getElementById("show-times");
    if (times) {
      var key = "knotless.showTimes";
      var apply = function () { root.classList.toggle("with-times", times.checked); };
      try { times.checked = window.localStorage.getItem(key) === "1"; } catch (e) {}
      apply();
      times.addEventListener("change", function () {
        apply();
        try { window.localStorage.setItem(key, times.checked ? "1" : "0"); } catch (e) {}
      });
    }
    this.connect(root.dataset.from);
  }

  // scrollToHash shows the line a link points at (#L<step>-<byte>) once it
  // has arrived.
  RunPage.prototype.scrollToHash = function () {
    if (this.hashShown || !location.hash) return;
    var el = document.getElementById(location.hash.slice(1));
    if (el) { this.hashShown = true; el.scrollIntoView({ block: "center" }); }
  };

  RunPage.prototype.following = function () {
    return this.live && window.innerHeight + window.scrollY >= document.body.scrollHeight - 40 && !location.hash;
  };

  RunPage.prototype.stepSection = function (st) {
    var s = document.getElementById("step-" + st.index);
    if (s) return s;
    s = document.createElement("section");
    s.className = "step"; s.id = "step-" + st.index;
    s.dataset.step = st.index; s.dataset.start = "0";
    var h = document.createElement("h3");
    var fold = document.createElement("button");
    fold.type = "button"; fold.className = "fold"; fold.setAttribute("aria-expanded", "true");
    fold.textContent = st.index === 0 ? "setup" : st.name;
    var state = document.createElement("span"); state.className = "state";
    var dur = document.createElement("span"); dur.className = "dur";
    var raw = document.createElement("a"); raw.className = "raw"; raw.textContent = "raw log";
    raw.href = "/-/runs/" + this.id + "/log/" + st.index + "/raw";
    h.append(fold, " ", state, " ", dur, " ", raw);
    var box = document.createElement("div"); box.className = "log"; box.setAttribute("role", "log");
    s.append(h, box);
    document.getElementById("steps").appendChild(s);
    this.steps[st.index] = new StepLog(s, this);
    return s;
  };

  RunPage.prototype.onState = function (ev) {
    var self = this;
    var state = document.getElementById("run-state");
    state.textContent = ev.state; state.className = "state st-" + ev.state;
    document.getElementById("run-reason").textContent = ev.reason || "";
    var msg = document.getElementById("run-message");
    msg.textContent = ev.message || "";
    msg.hidden = !ev.message;
    msg.previousElementSibling.hidden = !ev.message;
    document.getElementById("run-duration").textContent = ev.duration || "";
    var cancel = document.getElementById("cancel");
    if (cancel) cancel.hidden = !ev.canCancel;
    var rerun = document.getElementById("rerun");
    if (rerun) rerun.hidden = !ev.canRerun;
    ev.steps.forEach(function (st) {
      var s = self.stepSection(st);
      var badge = s.querySelector("h3 .state");
      badge.textContent = st.state; badge.className = "state st-" + st.state;
      var exit = s.querySelector("h3 .exit");
      if (st.exitCode !== undefined && st.exitCode !== null) {
        if (!exit) { exit = document.createElement("span"); exit.className = "exit"; badge.after(" ", exit); }
        exit.textContent = "exit " + st.exitCode;
      }
      s.querySelector("h3 .dur").textContent = st.duration || "";
    });
  };

  RunPage.prototype.connect = function (from) {
    var self = this;
    var es = new EventSource("/-/runs/" + this.id + "/events?from=" + encodeURIComponent(from));
    this.es = es;
    document.documentElement.dataset.stream = "connecting";
    es.onopen = function () { document.documentElement.dataset.stream = "open"; };
    es.onerror = function () { document.documentElement.dataset.stream = "reconnecting"; };
    es.addEventListener("run", function (e) { self.onState(JSON.parse(e.data)); });
    es.addEventListener("log", function (e) {
      var ev = JSON.parse(e.data);
      if (!self.steps[ev.step]) self.stepSection({ index: ev.step, name: "step " + ev.step });
      self.steps[ev.step].append(ev);
    });
    es.addEventListener("end", function () { es.close(); document.documentElement.dataset.stream = "ended"; });
  };

  // ---- the Pipelines tab refreshes its newest page in place.
  function livePipelines(box) {
    setInterval(function () {
      if (document.hidden) return;
      fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("pipelines");
          if (fresh && fresh.innerHTML !== box.innerHTML) box.replaceChildren.apply(box, Array.prototype.slice.call(fresh.childNodes));
        })
        .catch(function () {});
    }, 3000);
  }

  function init() {
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) { if (!window.confirm(f.dataset.confirm)) e.preventDefault(); });
    });
    var run = document.getElementById("run");
    if (run) window.knotlessRun = new RunPage(run);
    var p = document.getElementById("pipelines");
    if (p && p.dataset.live) livePipelines(p);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();

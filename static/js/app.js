/* Task screen behaviour on top of htmx. Everything here is an enhancement:
   without JS each button is a plain form post and the server redirects back.

   - Keys: 1 bad, 2 okay, 3 good, f unsure (toggle), ArrowUp/k previous,
     ArrowDown/j next, Enter submit. Keys pressed while a save is in flight are
     replayed in order once it lands, so fast typing rates the right steps.
   - Every click sends the full state of one completion plus a version number
     that only grows; the server ignores a version older than what it has.
     A response older than one already shown is not swapped in.
   - A rating is answered with only what changed (HX-Reswap: none plus
     out-of-band swaps: the rated row, a newly revealed step, the finish box,
     #task-state); a click that reshapes the steps gets the whole panel.
     #task-state says how many rows the page should have: a page that missed
     an update (a stale response dropped) reloads the panel.
   - Math is typeset with KaTeX auto-render in each newly swapped-in element. */
(function () {
  "use strict";

  var seq = 0;          // highest version sent or seen
  var shown = {};       // assignment id -> highest version swapped in
  var inflight = 0;
  var pendingKeys = [];
  var cursorId = null;

  function panel() { return document.getElementById("task"); }
  function completions() { return Array.prototype.slice.call(document.querySelectorAll("#task form.completion")); }

  function typeset(root) {
    if (!window.renderMathInElement || !root) return;
    window.renderMathInElement(root, {
      delimiters: [
        { left: "$$", right: "$$", display: true },
        { left: "\\[", right: "\\]", display: true },
        { left: "\\(", right: "\\)", display: false },
        { left: "$", right: "$", display: false }
      ],
      throwOnError: false,
      ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code", "option", "button"]
    });
  }

  function flash(message) {
    var el = document.getElementById("flash");
    if (!el) return;
    el.textContent = message;
    el.hidden = !message;
  }

  function setCursor(form) {
    completions().forEach(function (f) { f.classList.toggle("cursor", f === form); });
    cursorId = form ? form.id : null;
    if (form && form.scrollIntoView) form.scrollIntoView({ block: "nearest" });
  }

  function reloadPanel() {
    if (panel() && window.htmx) window.htmx.ajax("GET", window.location.pathname, { target: "#task", swap: "outerHTML" });
  }

  function initPanel() {
    var p = panel();
    var state = document.getElementById("task-state");
    if (!p || !state) return;
    var v = parseInt(state.getAttribute("data-version") || "0", 10);
    if (v > seq) seq = v;
    var steps = parseInt(state.getAttribute("data-steps") || "0", 10);
    var count = parseInt(state.getAttribute("data-completions") || "0", 10);
    if (inflight === 0 && (p.querySelectorAll("#steps > li").length !== steps || completions().length !== count)) {
      reloadPanel();
      return;
    }
    var current = state.getAttribute("data-current");
    var target = current && current !== "finish" ? document.getElementById(current) : null;
    if (current === "finish") {
      var all = completions();
      target = all.length ? all[all.length - 1] : null;
    }
    setCursor(target || (cursorId && document.getElementById(cursorId)) || null);
  }

  function reflect(form) {
    var rating = form.elements.rating.value;
    var flagged = form.elements.flagged.value === "1";
    ["r-bad", "r-okay", "r-good"].forEach(function (c) { form.classList.remove(c); });
    if (rating !== "") form.classList.add({ "-1": "r-bad", "0": "r-okay", "1": "r-good" }[rating]);
    form.querySelectorAll("button.rate").forEach(function (b) {
      var on = b.value === rating;
      b.classList.toggle("on", on);
      b.setAttribute("aria-pressed", on ? "true" : "false");
    });
    var flag = form.querySelector("button.flag");
    if (flag) {
      flag.classList.toggle("on", flagged);
      flag.setAttribute("aria-pressed", flagged ? "true" : "false");
      flag.value = flagged ? "0" : "1";
    }
  }

  function send(form, change) {
    if (!form || !form.classList.contains("completion") || form.querySelector("button[disabled]")) return;
    if (change.rating !== undefined) form.elements.rating.value = change.rating;
    if (change.flagged !== undefined) form.elements.flagged.value = change.flagged ? "1" : "0";
    seq += 1;
    form.elements.version.value = String(seq);
    reflect(form);
    flash("");
    post(form);
  }

  // Post a form of the panel through htmx. htmx.ajax rather than triggering
  // the form's own handler: a key pressed right after a swap reaches a form
  // that htmx has not processed yet, and a triggered "submit" would then be
  // silently lost while the page already shows the new state.
  function post(form) {
    if (!window.htmx) { form.submit(); return; }
    window.htmx.ajax("POST", form.getAttribute("hx-post") || form.action, {
      source: form, target: "#task", swap: "outerHTML"
    });
  }

  function move(delta) {
    var all = completions();
    if (!all.length) return;
    var i = all.findIndex(function (f) { return f.id === cursorId; });
    var j = Math.min(all.length - 1, Math.max(0, (i < 0 ? all.length - 1 : i) + delta));
    setCursor(all[j]);
  }

  function handleKey(key) {
    var form = cursorId ? document.getElementById(cursorId) : null;
    switch (key) {
      case "1": send(form, { rating: "-1" }); return;
      case "2": send(form, { rating: "0" }); return;
      case "3": send(form, { rating: "1" }); return;
      case "f": if (form) send(form, { flagged: form.elements.flagged.value !== "1" }); return;
      case "ArrowUp": case "k": move(-1); return;
      case "ArrowDown": case "j": move(1); return;
      case "Enter":
        var finish = document.getElementById("finish");
        if (finish) post(finish);
        return;
    }
  }

  var KEYS = { "1": 1, "2": 1, "3": 1, "f": 1, "F": 1, "ArrowUp": 1, "ArrowDown": 1, "k": 1, "j": 1, "Enter": 1 };

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || !KEYS[e.key] || !panel()) return;
    var t = e.target;
    if (t && t.closest && t.closest("input, textarea, select, summary, [contenteditable]")) return;
    if (e.key === "Enter" && t && t.closest && t.closest("button, a")) return;
    e.preventDefault();
    var key = e.key === "F" ? "f" : e.key;
    if (inflight > 0) { pendingKeys.push(key); return; }
    handleKey(key);
  });

  // Clicks on rating and flag buttons: update the hidden state first, so the
  // request carries the whole intended state of the completion.
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("form.completion button");
    if (!button || button.disabled || !window.htmx) return;
    e.preventDefault();
    e.stopPropagation();
    setCursor(button.form);
    if (button.name === "set_rating") send(button.form, { rating: button.value });
    else if (button.name === "set_flagged") send(button.form, { flagged: button.value === "1" });
  }, true);

  document.addEventListener("htmx:beforeRequest", function () { inflight += 1; });
  document.addEventListener("htmx:afterRequest", function () {
    inflight = Math.max(0, inflight - 1);
  });

  document.addEventListener("htmx:beforeSwap", function (e) {
    var header = e.detail.xhr && e.detail.xhr.getResponseHeader("X-Rating-Version");
    if (!header || !e.detail.shouldSwap) return;
    var parts = header.split(":");
    var id = parts[0], version = parseInt(parts[1], 10);
    if ((shown[id] || 0) > version) { e.detail.shouldSwap = false; return; }
    shown[id] = version;
  });

  document.addEventListener("htmx:responseError", function (e) {
    var xhr = e.detail.xhr;
    var text = xhr && xhr.getResponseHeader("Content-Type") && xhr.getResponseHeader("Content-Type").indexOf("text/plain") === 0
      ? xhr.responseText : "The server could not save that (" + (xhr ? xhr.status : "?") + ").";
    flash(text);
    pendingKeys = [];
    // Show what the server really has: the optimistic state may be wrong now.
    reloadPanel();
  });

  document.addEventListener("htmx:sendError", function () {
    flash("Not saved: the connection to the server was lost. Your earlier ratings are safe; press the key again when you are back online.");
    pendingKeys = [];
  });

  // Every element htmx inserts (the panel, or a row swapped in out of band)
  // is typeset once, when it arrives.
  document.addEventListener("htmx:load", function (e) {
    var elt = e.target;
    if (elt && elt !== document.body && elt.closest && elt.closest("#task")) typeset(elt);
  });

  document.addEventListener("htmx:afterSettle", function (e) {
    // Once per response: out-of-band rows settle too, each with this event.
    if (!e.target || e.target.id !== "task") return;
    initPanel();
    while (inflight === 0 && pendingKeys.length) handleKey(pendingKeys.shift());
  });

  document.addEventListener("DOMContentLoaded", function () {
    typeset(document.querySelector("main"));
    initPanel();
  });
})();

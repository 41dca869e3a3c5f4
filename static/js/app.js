/* Task screen behaviour on top of htmx. Everything here is an enhancement:
   without JS each button is a plain form post and the server redirects back.

   - Keys (docs/labeling-guide.md): 1 bad, 2 okay, 3 good, F unsure (toggle),
     each on the highlighted step; ArrowUp/K previous, ArrowDown/J next;
     Enter submits, and only when the submit box is shown. Enter on a focused
     rating button is not a rating (nor is any keyboard "click" on one).
   - Phase 2 (the rating screen): every key press and click goes through the
     press queue (press-queue.js), which orders them and aims each at the
     state version the page showed. This file draws them: a press shows at
     once, marked pending until the server says it is stored; the cursor moves
     on as the press will move it, revealing the next step from the page's
     #steps-ahead; a refused press is reported (#flash) and the stored state
     is loaded in its place. Where the next state cannot be known (a -1 on a
     step, which ends the solution there), keys are held, and said to be, until
     the stored state is shown.
   - Phase 1 (building a solution) still posts each click with a version
     number that only grows; the server ignores an older one, and a response
     older than one already shown is not swapped in.
   - Task pages are never shown from the back/forward cache: a page restored
     from it is reloaded (the server also sends Cache-Control: no-store).
   - Math is typeset with KaTeX auto-render in each newly swapped-in element. */
(function () {
  "use strict";

  var seq = 0;          // phase 1: highest version sent or seen
  var shown = {};       // phase 1: assignment id -> highest version swapped in
  var inflight = 0;     // phase 1: htmx requests in flight
  var pendingKeys = []; // keys pressed while a save was in flight (phase 1) or a new panel settles
  var settling = false; // a panel is swapped in and not settled yet: its cursor (and, phase 2, its queue) is not set
  var cursorId = null;

  var queue = null;     // phase 2: the press queue of the panel shown
  var hold = "";        // phase 2: why keys are not taken right now ("" when they are)
  var reloadAfterAck = false;
  var loading = false;  // the stored state is being loaded into the panel
  var afterSaved = null; // phase 2: what was asked for (submit, give up, report) while presses were unsaved
  var enterAfterLoad = false; // phase 2: Enter pressed while the panel a press reshaped was loading
  var awaited = null;   // phase 2: presses sent by this tab's previous page that may still land (see below)
  var AWAIT_MS = 5000;  // how long a page waits for them
  var LANDING_KEY = "annotate.presses-landing";

  // What the browser tests (and anyone curious) can ask: is anything unsaved?
  window.pressQueue = { busy: function () { return loading || !!awaited || pendingKeys.length > 0 || !!(queue && queue.busy()); } };

  function panel() { return document.getElementById("task"); }
  function completions() { return Array.prototype.slice.call(document.querySelectorAll("#task form.completion")); }
  function state() { return document.getElementById("task-state"); }

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

  // The notice is fixed at the bottom of the window: while it shows, the page
  // gets as much room below its end, and scrolling keeps the highlighted row
  // above it, so it never covers the row the keys act on.
  function flash(message) {
    var el = document.getElementById("flash");
    if (!el) return;
    el.textContent = message;
    el.hidden = !message;
    var room = message ? el.offsetHeight + 24 + "px" : "";
    document.body.style.paddingBottom = room;
    document.documentElement.style.scrollPaddingBottom = room;
    var row = cursorId && document.getElementById(cursorId);
    if (message && row && row.scrollIntoView) row.scrollIntoView({ block: "nearest" });
  }

  function setCursor(form) {
    completions().forEach(function (f) { f.classList.toggle("cursor", f === form); });
    cursorId = form ? form.id : null;
    if (form && form.scrollIntoView) form.scrollIntoView({ block: "nearest" });
  }

  function assignmentUrl() {
    var p = panel();
    var id = p && p.getAttribute("data-assignment");
    return id ? "/assignments/" + id + "/" : window.location.pathname;
  }

  function reloadPanel() {
    if (!panel() || !window.htmx) return;
    loading = true;
    window.htmx.ajax("GET", assignmentUrl(), { target: "#task", swap: "outerHTML" });
  }

  // The page's CSRF token, which htmx sends with each of its requests
  // (base.html's hx-headers). A panel swapped in by htmx has no token fields.
  function csrfToken() {
    try {
      var headers = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
      if (headers["X-CSRFToken"]) return headers["X-CSRFToken"];
    } catch (e) { /* not JSON: fall back to a form's field */ }
    var input = document.querySelector("#task input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function initPanel() {
    var p = panel();
    var st = state();
    loading = false;
    queue = null;
    var reshaped = reloadAfterAck;
    var enter = enterAfterLoad;
    reloadAfterAck = false;
    enterAfterLoad = false;
    hold = "";
    afterSaved = null;
    if (!p || !st) { awaited = null; return; }
    var v = parseInt(st.getAttribute("data-version") || "0", 10);
    var url = st.getAttribute("data-presses");
    if (url) {
      // Phase 2: a fresh queue aimed at the state this panel shows.
      queue = window.PressQueue.create({ url: url, version: v, csrf: csrfToken(), onAck: acked, onRefused: refusedPresses });
      if (st.getAttribute("data-open") !== "1") hold = "This task is submitted; it can no longer be changed.";
      else if (document.querySelector("#finish-box [hx-trigger]")) hold = "Wait a moment: other candidates for this step are being generated.";
      awaitLanding(p, v, st.getAttribute("data-open") === "1");
    } else {
      if (v > seq) seq = v;
      var steps = parseInt(st.getAttribute("data-steps") || "0", 10);
      var count = parseInt(st.getAttribute("data-completions") || "0", 10);
      if (inflight === 0 && (p.querySelectorAll("#steps > li").length !== steps || completions().length !== count)) {
        reloadPanel();
        return;
      }
    }
    var current = st.getAttribute("data-current");
    var target = current && current !== "finish" ? document.getElementById(current) : null;
    if (current === "finish") {
      var all = completions();
      target = all.length ? all[all.length - 1] : null;
    }
    setCursor(target || (cursorId && document.getElementById(cursorId)) || null);
    // Enter pressed while a press that reshaped the solution was saved: it
    // meant "submit what I rated", so it submits now if the box is shown.
    if (enter && reshaped && queue && !awaited) { flash(""); submit(); }
  }

  // Presses this tab's previous page of the task sent just before it was left
  // (a reload, Back): the server may store them after it rendered this page,
  // which would then show fewer ratings than are stored and aim the next press
  // at a state that no longer is (refused as if from another tab). The old
  // page wrote down the version its batch in flight leads to (pagehide,
  // below); until the stored state has reached it, or AWAIT_MS have passed
  // (the batch was refused), this page holds keys and loads the state again.
  function awaitLanding(p, version, open) {
    if (awaited === null) {
      var note = null;
      try {
        note = JSON.parse(window.sessionStorage.getItem(LANDING_KEY) || "null");
        window.sessionStorage.removeItem(LANDING_KEY);
      } catch (e) { note = null; }
      if (note && note.assignment === p.getAttribute("data-assignment") && Date.now() - note.at < AWAIT_MS) {
        awaited = { version: note.version, until: Date.now() + AWAIT_MS };
      }
    }
    if (!awaited) return;
    if (!open || version >= awaited.version || Date.now() > awaited.until) {
      awaited = null;
      flash("");
      return;
    }
    hold = "Loading what is stored: your last key presses are still being saved.";
    flash(hold);
    window.setTimeout(reloadPanel, 150);
  }

  window.addEventListener("pagehide", function () {
    var p = panel();
    var landing = queue ? queue.landing() : 0;
    if (!p || !landing) return;
    try {
      window.sessionStorage.setItem(LANDING_KEY, JSON.stringify(
        { assignment: p.getAttribute("data-assignment"), version: landing, at: Date.now() }));
    } catch (e) { /* no storage: the page shows what was stored when it was rendered */ }
  });

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

  // --- Phase 2: presses through the queue --------------------------------------

  function where(form) {
    var parts = form.id.split("-");
    return { step: parseInt(parts[1], 10), completion: parseInt(parts[2], 10) };
  }

  function markPending(form, delta) {
    var n = parseInt(form.getAttribute("data-pending") || "0", 10) + delta;
    if (n > 0) form.setAttribute("data-pending", String(n)); else form.removeAttribute("data-pending");
    form.classList.toggle("pending", n > 0);
  }

  // Where the keyboard goes after a rating: the server's rule (the first
  // unrated step; at the error step the first unrated candidate; else the
  // last completion), applied to what the page shows. The next step is
  // revealed from #steps-ahead when labeling moves past the last one shown.
  function nextCurrent() {
    var error = document.querySelector("#steps > li.is-error");
    if (error) {
      var alt = Array.prototype.slice.call(error.querySelectorAll("form.completion.alt"))
        .find(function (f) { return f.elements.rating.value === ""; });
      if (alt) return alt;
    } else {
      var own = Array.prototype.slice.call(document.querySelectorAll("#steps form.completion:not(.alt)"))
        .find(function (f) { return f.elements.rating.value === ""; });
      if (own) return own;
      var ahead = document.getElementById("steps-ahead");
      var row = ahead && ahead.content && ahead.content.firstElementChild;
      if (row) {
        document.getElementById("steps").appendChild(row);
        typeset(row);
        return row.querySelector("form.completion");
      }
    }
    var all = completions();
    return all.length ? all[all.length - 1] : null;
  }

  function press(form, change) {
    if (!form || !queue || !form.classList.contains("completion")) return;
    if (hold) { flash(hold + " That key was not used."); return; }
    var at = where(form);
    var item = { step: at.step, completion: at.completion, form: form.id };
    if (change.flag !== undefined) item.flag = change.flag; else item.rating = parseInt(change.rating, 10);
    // A -1 on a step, or a new rating of the step rated -1, reshapes the
    // solution (later steps dropped, candidates added): hold until it is shown.
    var reshapes = at.completion === 0 && item.rating !== undefined &&
      (item.rating === -1 || form.elements.rating.value === "-1");
    if (!queue.push(item)) return;
    flash("");
    if (item.flag !== undefined) form.elements.flagged.value = item.flag ? "1" : "0";
    else form.elements.rating.value = String(item.rating);
    reflect(form);
    markPending(form, 1);
    if (reshapes) {
      reloadAfterAck = true;
      hold = "Wait a moment: step " + (at.step + 1) + " is being saved, and what follows it depends on that.";
      return;
    }
    if (item.rating !== undefined) setCursor(nextCurrent());
  }

  // Submitting, giving up or reporting while presses are unsaved would close
  // the task under them. The request waits for them instead: it is made once
  // every press is stored, on the state that was shown when it was asked for,
  // and it is dropped (and said to be) if a press is refused or the stored
  // state has to be reloaded first: then the labeler sees it and asks again.
  function whenSaved(action) {
    afterSaved = action;
    flash("Saving your last ratings first; then your request is sent.");
  }

  function dropAfterSaved() {
    if (!afterSaved) return "";
    afterSaved = null;
    return "Your request (submit, give up or report) was not sent; look at the task and ask again. ";
  }

  function acked(done, answer, remaining) {
    done.forEach(function (p) {
      var form = document.getElementById(p.form);
      if (form) markPending(form, -1);
    });
    if (remaining) return;
    if (reloadAfterAck || answer.reshaped) {
      reloadAfterAck = true;
      // Enter waits for the reshaped panel (initPanel); give up and report are not sent.
      if (afterSaved === submit) { afterSaved = null; enterAfterLoad = true; }
      var dropped = dropAfterSaved();
      reloadPanel();
      if (dropped) flash(dropped);
      return;
    }
    var box = document.getElementById("finish-box");
    if (box && typeof answer.finish_box === "string") {
      box.outerHTML = answer.finish_box;
      box = document.getElementById("finish-box");
      if (box && window.htmx) window.htmx.process(box);
      if (box && box.querySelector("[hx-trigger]")) hold = "Wait a moment: other candidates for this step are being generated.";
    }
    var action = afterSaved;
    afterSaved = null;
    if (action) { flash(""); action(); }
  }

  function refusedPresses(dropped, answer, status) {
    var n = dropped.length;
    var lost = n ? (n === 1 ? "1 key press was not saved. " : n + " key presses were not saved. ") : "";
    var why;
    if (answer && answer.refused === "stale") why = "This task changed in another tab. ";
    else if (answer && answer.message) why = answer.message + " ";
    else if (answer && answer.error) why = answer.error + " ";
    else why = status ? "The server could not save that (" + status + "). " : "The connection to the server was lost. ";
    hold = "Loading what is stored.";
    var enter = enterAfterLoad ? "Your Enter (submit) was not used. " : "";
    enterAfterLoad = false;
    flash(why + lost + dropAfterSaved() + enter + "Here is what is stored.");
    reloadPanel();
  }

  // --- Phase 1: one post per click ---------------------------------------------

  function send(form, change) {
    if (queue) { press(form, change.flagged !== undefined ? { flag: change.flagged } : change); return; }
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

  function submit() {
    var finish = document.getElementById("finish");
    if (!finish && !queue) return;
    // Enter straight after the last key: the box that key's answer brings is
    // not shown yet. Enter waits for the presses (and for the panel a press
    // reshaped), then submits if the box is shown by then.
    if (queue && queue.busy()) { whenSaved(submit); return; }
    if (queue && loading && reloadAfterAck) {
      enterAfterLoad = true;
      flash("Saving your last ratings first; then your request is sent.");
      return;
    }
    if (!finish) {
      flash("Enter submits once the submit box is shown: after every step is rated, or after the step you rated -1 and its candidates.");
      return;
    }
    if (queue && hold) { flash(hold); return; }
    if (queue) hold = "Submitting.";
    post(finish);
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
      case "Enter": submit(); return;
    }
  }

  var KEYS = { "1": 1, "2": 1, "3": 1, "f": 1, "F": 1, "ArrowUp": 1, "ArrowDown": 1, "k": 1, "j": 1, "Enter": 1 };

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || !KEYS[e.key] || !panel()) return;
    var t = e.target;
    if (t && t.closest && t.closest("input, textarea, select, summary, [contenteditable]")) return;
    // Enter on another button or a link is that control's own action; on a
    // rating or flag button it is never a rating: it is Enter (submit).
    if (e.key === "Enter" && t && t.closest && t.closest("button, a") && !t.closest("form.completion")) return;
    e.preventDefault();
    var key = e.key === "F" ? "f" : e.key;
    // Until the panel a response brings has settled, the cursor and the press queue
    // are the old panel's (phase 2: a submitted task's, which takes no key): a key
    // pressed then waits for the new one, as one pressed while a phase-1 request was in flight.
    if (settling || (!queue && inflight > 0)) { pendingKeys.push(key); return; }
    handleKey(key);
  });

  // Clicks on rating and flag buttons: update the hidden state first, so the
  // request carries the whole intended state of the completion. A "click" made
  // by the keyboard (Enter or Space on a focused button, detail 0) is not one:
  // ratings are keys 1, 2, 3 or a pointer click.
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("form.completion button");
    if (!button || button.disabled || !window.htmx) return;
    e.preventDefault();
    e.stopPropagation();
    if (e.detail === 0) return;
    setCursor(button.form);
    if (button.name === "set_rating") send(button.form, { rating: button.value });
    else if (button.name === "set_flagged") send(button.form, { flagged: button.value === "1" });
  }, true);

  document.addEventListener("htmx:beforeRequest", function (e) {
    // The "candidates are coming" poll must not replace a panel with unsaved presses.
    if (queue && queue.busy() && e.detail.requestConfig && e.detail.requestConfig.verb === "get" && !loading) {
      e.preventDefault();
      return;
    }
    // Leaving the task (give up, bad problem) while presses are unsaved would
    // close it under them: first the presses, then the rest.
    var posting = queue && e.detail.requestConfig && e.detail.requestConfig.verb === "post";
    if (posting && queue.busy()) {
      e.preventDefault();
      var source = e.detail.elt;
      whenSaved(function () {
        // The same form, submitted again once the presses are stored (htmx
        // handles its submit event as it did the first time).
        if (source && source.isConnected && source.requestSubmit) source.requestSubmit();
      });
      return;
    }
    inflight += 1;
    // Counted down when the request ends, on the request itself: htmx sends afterRequest
    // to the element that made it, and from a form that a newer response has already
    // replaced that event never reaches the document, which left inflight stuck above 0
    // and every later key waiting.
    e.detail.xhr.addEventListener("loadend", requestEnded);
    // No key press may aim at a task that is being left.
    if (posting) hold = hold || "Sending.";
  });
  // The keys that waited, in order: once the new panel has settled and (phase 1) no request is in flight.
  function replayPending() {
    while (!settling && (queue || inflight === 0) && pendingKeys.length) handleKey(pendingKeys.shift());
  }

  // After htmx has handled the response (its "load" handler, the swap, runs first).
  function requestEnded() {
    inflight = Math.max(0, inflight - 1);
    // A response that brought a panel has swapped it in by now and settles it later
    // (settling, below): the waiting keys are replayed then, on its cursor. One that
    // brings none (an older version's, not swapped in; one for a panel already
    // replaced) never settles: they are replayed now, on the panel shown.
    replayPending();
  }

  document.addEventListener("htmx:beforeSwap", function (e) {
    var xhr = e.detail.xhr;
    var header = xhr && xhr.getResponseHeader("X-Rating-Version");
    if (header && e.detail.shouldSwap && !queue) {
      var parts = header.split(":");
      var id = parts[0], version = parseInt(parts[1], 10);
      if ((shown[id] || 0) > version) e.detail.shouldSwap = false;
      else shown[id] = version;
    }
    // htmx swaps at once and settles later (settleDelay); the request ends in between,
    // and until the settle the cursor is the old panel's.
    if (e.detail.shouldSwap && e.detail.target && e.detail.target.id === "task") settling = true;
  });

  // A swap that failed settles nothing: the keys waiting for it go to the panel shown.
  document.addEventListener("htmx:swapError", function () {
    settling = false;
    replayPending();
  });

  document.addEventListener("htmx:responseError", function (e) {
    var xhr = e.detail.xhr;
    var text = xhr && xhr.getResponseHeader("Content-Type") && xhr.getResponseHeader("Content-Type").indexOf("text/plain") === 0
      ? xhr.responseText : "The server could not save that (" + (xhr ? xhr.status : "?") + ").";
    flash(text);
    pendingKeys = [];
    // Show what the server really has: the optimistic state may be wrong now.
    if (!loading) reloadPanel(); else loading = false;
  });

  document.addEventListener("htmx:sendError", function () {
    loading = false;
    if (queue) {
      hold = "The connection to the server was lost: reload the page to see what is stored.";
      flash(hold);
      return;
    }
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
    settling = false;
    initPanel();
    replayPending();
  });

  // A page restored from the back/forward cache shows a state that may be
  // long gone (a submitted task as editable): load it afresh.
  window.addEventListener("pageshow", function (e) {
    if (e.persisted && panel()) window.location.reload();
  });

  document.addEventListener("DOMContentLoaded", function () {
    typeset(document.querySelector("main"));
    initPanel();
  });
})();

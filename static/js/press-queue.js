/* The press queue: the one place that orders a labeler's key presses.

   The protocol (docs/architecture.md, "Key presses"):
   - Each press is captured when the key goes down, with the completion it
     was aimed at (the highlighted one) and the state version the page showed
     at that moment. The page knows what its own presses will do to the state,
     so a press typed while earlier ones are still unsaved is numbered ahead:
     the n-th unacknowledged press is aimed at version acked + n, the state
     the earlier presses lead to. Where the page cannot know the next state
     (a -1 that ends the solution), it holds keys until the server has
     answered; it never guesses.
   - Presses are appended to one ordered queue and sent as ordered batches,
     one batch at a time (POST assignments/<id>/presses/); the next batch
     leaves only after the previous one was answered, so they reach the
     server in the order they were typed.
   - The server applies a batch in one transaction, each press to exactly its
     completion if its version is the stored one, and refuses the first press
     that is not (and every press after it). The answer says how many were
     stored; those are acknowledged, the rest are dropped and reported, and
     the caller shows the stored state.

   No DOM here: app.js draws pending and stored presses and reacts to
   refusals. create(options) returns { push, busy, pending, version, landing, stopped }.
     options.url      where batches are posted
     options.version  the stored state version the page was rendered with
     options.csrf     the CSRF token
     options.onAck(presses, answer)      presses stored, in order
     options.onRefused(dropped, answer)  the presses not stored (answer null
                                         when the server could not be reached) */
(function () {
  "use strict";

  var MAX_BATCH = 50; // the server takes at most 100

  function create(options) {
    var acked = options.version;   // the stored version after every acknowledged press
    var queue = [];                // presses not yet acknowledged, in typing order
    var sending = 0;               // how many of queue[0..] are in the batch in flight
    var stopped = false;           // a refusal: nothing more is sent from this queue

    function push(press) {
      if (stopped) return false;
      press.version = acked + queue.length;
      queue.push(press);
      flush();
      return true;
    }

    function flush() {
      if (sending || stopped || !queue.length) return;
      var batch = queue.slice(0, MAX_BATCH);
      sending = batch.length;
      var body = JSON.stringify({
        presses: batch.map(function (p) {
          var item = { step: p.step, completion: p.completion, version: p.version };
          if (p.flag !== undefined) item.flag = p.flag; else item.rating = p.rating;
          return item;
        })
      });
      fetch(options.url, {
        method: "POST",
        credentials: "same-origin",
        keepalive: true, // a batch sent just before the page is left (reload, Back) still arrives
        headers: { "Content-Type": "application/json", "X-CSRFToken": options.csrf, "Accept": "application/json" },
        body: body
      }).then(function (response) {
        return response.json().then(function (answer) { return answer; }, function () { return null; })
          .then(function (answer) { settle(batch, response.status, answer); });
      }, function () {
        settle(batch, 0, null);
      });
    }

    function settle(batch, status, answer) {
      sending = 0;
      var applied = answer && typeof answer.applied === "number" ? Math.min(answer.applied, batch.length) : 0;
      if (applied) {
        var done = queue.splice(0, applied);
        acked = answer.version;
        options.onAck(done, answer, queue.length);
      }
      if (status === 200 && applied === batch.length) {
        flush();
        return;
      }
      // Refused, or no answer we can read: whatever was not acknowledged was
      // aimed at a state that will not exist. Stop; the caller shows what is stored.
      stopped = true;
      var dropped = queue.splice(0, queue.length);
      options.onRefused(dropped, answer, status);
    }

    return {
      push: push,
      busy: function () { return sending > 0 || queue.length > 0; },
      pending: function () { return queue.slice(); },
      version: function () { return acked + queue.length; },
      // The state version the batch in flight leads to if it is stored (0: none in flight).
      landing: function () { return sending ? acked + sending : 0; },
      stopped: function () { return stopped; }
    };
  }

  window.PressQueue = { create: create };
})();

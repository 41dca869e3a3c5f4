/* Phase-1 screen on top of app.js (which handles the candidates' keys, ratings,
   versions and the Enter = post #finish rule through htmx.ajax). This adds only
   the live KaTeX preview of the labeler's own step. */
(function () {
  "use strict";

  function preview() {
    var input = document.getElementById("own-step");
    var out = document.getElementById("own-preview");
    if (!input || !out) return;
    out.textContent = input.value;
    if (window.renderMathInElement) {
      window.renderMathInElement(out, {
        delimiters: [
          { left: "$$", right: "$$", display: true },
          { left: "\\[", right: "\\]", display: true },
          { left: "\\(", right: "\\)", display: false },
          { left: "$", right: "$", display: false }
        ],
        throwOnError: false
      });
    }
  }

  document.addEventListener("input", function (e) {
    if (e.target && e.target.id === "own-step") preview();
  });
  document.addEventListener("htmx:afterSettle", preview);
  document.addEventListener("DOMContentLoaded", preview);
})();

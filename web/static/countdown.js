// Countdowns of pending approvals (issue 16, item 3): each <time data-countdown> says "times out
// in 14:52" and ticks down. The server renders it with data-remaining-ms, measured on its own
// clock, so the deadline is anchored to this page's monotonic clock when the element first
// appears (a browser with a wrong clock still counts right). At 0 it says "timing out…" until the
// server's approval_resolved replaces the prompt. No rendering happens here: only the text of a
// server-rendered element changes.
(function () {
  "use strict";

  // The wording is the element's: data-countdown-prefix and data-countdown-end (an outside
  // agent's call says "the agent stops waiting in 1:25", templates.AgentCountdown), else the
  // approval's own timeout's.
  function text(el, ms) {
    var prefix = el.getAttribute("data-countdown-prefix");
    if (prefix === null) prefix = "times out in ";
    if (ms <= 0) {
      var end = el.getAttribute("data-countdown-end");
      return end === null ? "timing out…" : end;
    }
    var secs = Math.ceil(ms / 1000);
    var h = Math.floor(secs / 3600), m = Math.floor(secs / 60) % 60, s = secs % 60;
    var ss = (s < 10 ? "0" : "") + s;
    if (h > 0) return prefix + h + ":" + (m < 10 ? "0" : "") + m + ":" + ss;
    return prefix + m + ":" + ss;
  }

  function tick() {
    var now = performance.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      if (el._deadline === undefined) {
        var left = Number(el.getAttribute("data-remaining-ms"));
        if (!isFinite(left)) left = Date.parse(el.getAttribute("datetime")) - Date.now();
        el._deadline = now + left;
      }
      var t = text(el, el._deadline - now);
      if (el.textContent !== t) el.textContent = t;
    });
  }

  // Elapsed times (issue 34): <time data-elapsed data-elapsed-ms> says how long the model turn
  // has run ("12 s", "2 min 5 s", templates.ElapsedText), anchored like the countdowns.
  function elapsed(ms) {
    var secs = Math.max(Math.floor(ms / 1000), 0);
    if (secs < 60) return secs + " s";
    return Math.floor(secs / 60) + " min " + (secs % 60) + " s";
  }

  function tickElapsed() {
    var now = performance.now();
    document.querySelectorAll("time[data-elapsed]").forEach(function (el) {
      if (el._start === undefined) {
        var ran = Number(el.getAttribute("data-elapsed-ms"));
        el._start = now - (isFinite(ran) ? ran : 0);
      }
      var t = elapsed(now - el._start);
      if (el.textContent !== t) el.textContent = t;
    });
  }

  var tickCountdowns = tick;
  tick = function () {
    tickCountdowns();
    tickElapsed();
  };

  document.addEventListener("DOMContentLoaded", tick);
  // Prompts arrive live and with responses: start them at once, not at the next second.
  document.addEventListener("htmx:wsAfterMessage", tick);
  document.addEventListener("htmx:afterSettle", tick);
  setInterval(tick, 1000);
})();

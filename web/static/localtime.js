// Times in the reader's own time zone (issue 16, item 6). The server renders each moment as
// <time datetime="…Z" title="… UTC" data-localtime>… UTC</time>; this rewrites the text to the
// browser's local time ("2026-12-02 06:41:02 GMT+9") and leaves the UTC value in the title.
// Without JavaScript the UTC text stays. Nothing else of the page is rendered here.
(function () {
  "use strict";

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  // The short name of the local zone at that moment ("GMT+9", "CET"), else its UTC offset.
  function zone(d) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d);
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") return parts[i].value;
      }
    } catch (e) { /* an old browser: the offset below */ }
    var off = -d.getTimezoneOffset();
    var sign = off < 0 ? "-" : "+";
    off = Math.abs(off);
    return "UTC" + sign + pad(Math.floor(off / 60)) + ":" + pad(off % 60);
  }

  function localise(root) {
    if (!root || !root.querySelectorAll) return;
    var els = root.querySelectorAll("time[data-localtime]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) continue;
      // Two parts, as the server renders them, so the date and the time of day each stay whole.
      var day = document.createElement("span");
      day.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate());
      var clock = document.createElement("span");
      clock.textContent = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + " " + zone(d);
      el.replaceChildren(day, " ", clock);
    }
  }

  document.addEventListener("DOMContentLoaded", function () { localise(document); });
  // Fragments swapped in later (live updates) carry UTC text too.
  document.addEventListener("htmx:load", function (e) { localise(e.target); });
})();

// "Your decision was not applied: already approved by alice" is the answer to this page's own
// request (issue 16, item 5): no live update carries it and the server cannot render it again.
// It sits beside its call's approval slot, so live updates of the slot leave it alone; when the
// live socket reconnects and its resync replaces the whole transcript, it is put back beside the
// new slot. A reload, a new look at the page, shows the outcome line alone.
(function () {
  "use strict";

  var kept = {};

  function remember() {
    document.querySelectorAll(".approval-notice[id]").forEach(function (el) { kept[el.id] = el; });
  }

  function restore() {
    Object.keys(kept).forEach(function (id) {
      if (document.getElementById(id)) return;
      var slot = document.getElementById(id.replace(/-notice$/, "-approval"));
      if (slot) slot.after(kept[id]);
    });
  }

  document.addEventListener("htmx:oobAfterSwap", remember);
  document.addEventListener("htmx:afterSettle", remember);
  document.addEventListener("htmx:wsAfterMessage", function () {
    restore();
    remember();
  });
})();

// Countersign's page behaviour that htmx does not cover. No rendering happens here: every
// fragment comes from the server's templ components.
(function () {
  "use strict";

  // Fragments marked data-upsert are appended by live updates; when an element with the same id
  // already exists (a replayed or resynced event), the new one takes the old one's place.
  function dedupe() {
    var seen = {};
    document.querySelectorAll("[data-upsert][id]").forEach(function (el) {
      // An element inside a copy that was just replaced is no longer in the page: skip it.
      if (!el.isConnected) return;
      var first = seen[el.id];
      if (first && first !== el && first.isConnected) first.replaceWith(el);
      seen[el.id] = el;
    });
  }

  // Keep the transcript scrolled to the bottom while the reader is at the bottom.
  var stick = true;
  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }
  window.addEventListener("scroll", function () { stick = nearBottom(); }, { passive: true });
  function follow() {
    if (stick) window.scrollTo(0, document.body.scrollHeight);
  }

  document.addEventListener("htmx:wsAfterMessage", function () {
    dedupe();
    follow();
  });

  // A message that was accepted leaves the box; a refused one stays in it.
  document.addEventListener("htmx:afterRequest", function (e) {
    var form = e.detail.elt;
    if (!form || !form.matches || !form.matches("form[data-reset-on-success]")) return;
    var status = e.detail.xhr ? e.detail.xhr.status : 0;
    if (status >= 200 && status < 300) {
      form.reset();
      stick = true;
      follow();
    }
  });

  // Ctrl/Cmd+Enter sends.
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Enter" || !(e.ctrlKey || e.metaKey)) return;
    var form = e.target.closest && e.target.closest("form[data-reset-on-success]");
    if (form) {
      e.preventDefault();
      form.requestSubmit();
    }
  });

  // "Edit" shows the arguments as JSON; approving then sends the edit.
  document.addEventListener("click", function (e) {
    var btn = e.target.closest && e.target.closest("[data-action=edit-arguments]");
    if (!btn) return;
    var form = btn.closest("form");
    var box = form.querySelector(".edit-args");
    var area = box.querySelector("textarea");
    if (box.hidden) {
      box.hidden = false;
      area.disabled = false;
      if (!area.value) area.value = area.dataset.original || "{}";
      area.focus();
      btn.textContent = "Cancel edit";
    } else {
      box.hidden = true;
      area.disabled = true;
      area.value = "";
      btn.textContent = "Edit";
    }
  });
})();

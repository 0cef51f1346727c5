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

  // Following the run (keeping the transcript's end in view) is follow.js's.

  // The live connection's state, said plainly: reconnecting after a drop, or ended for good when
  // a share link was revoked or expired (the server closes with 1008).
  function banner(text, kind) {
    var el = document.getElementById("connection-banner");
    if (!text) {
      if (el) el.remove();
      return;
    }
    if (!el) {
      el = document.createElement("p");
      el.id = "connection-banner";
      el.setAttribute("role", "status");
      document.body.appendChild(el);
    }
    el.className = "connection-banner " + kind;
    el.textContent = text;
  }
  var ended = false;
  document.addEventListener("htmx:wsClose", function (e) {
    var code = e.detail && e.detail.event ? e.detail.event.code : 0;
    if (code === 1008) {
      ended = true;
      // The server says why (a revoked link, a logout, a deleted session).
      var reason = e.detail.event.reason;
      banner(reason || "This share link was revoked or has expired. The page no longer updates.", "ended");
      document.querySelectorAll(".approval-form button, .approval-form input, .approval-form textarea, .remember-form button, .remember-form input, .remember-form select")
        .forEach(function (b) { b.disabled = true; });
      var sock = e.detail.socketWrapper;
      var elt = e.target;
      if (elt && elt.removeAttribute) elt.removeAttribute("ws-connect");
      if (sock && sock.socket) sock.socket.close();
      return;
    }
    if (!ended) banner("Connection lost — reconnecting…", "lost");
  });
  document.addEventListener("htmx:wsOpen", function () { if (!ended) banner("", ""); });
  document.addEventListener("htmx:sendError", function () {
    if (!ended) banner("The server cannot be reached. Your action was not sent; try again when it is back.", "lost");
  });

  document.addEventListener("htmx:wsAfterMessage", dedupe);
  // A page of the inbox loaded after live cards arrived may hold them too (issue 20).
  document.addEventListener("htmx:afterSettle", dedupe);

  // A message that was accepted leaves the box; a refused one stays in it.
  document.addEventListener("htmx:afterRequest", function (e) {
    var form = e.detail.elt;
    if (!form || !form.matches || !form.matches("form[data-reset-on-success]")) return;
    var status = e.detail.xhr ? e.detail.xhr.status : 0;
    if (status >= 200 && status < 300) {
      form.reset();
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

  // "Always allow…" (SPEC §14) opens and closes its prompt's rule form (RememberForm), and puts
  // the cursor at the end of the suggested rule, ready to edit.
  document.addEventListener("click", function (e) {
    var btn = e.target.closest && e.target.closest("[data-action=remember]");
    if (!btn) return;
    var form = document.getElementById(btn.getAttribute("aria-controls"));
    if (!form) return;
    var open = form.hidden;
    form.hidden = !open;
    btn.setAttribute("aria-expanded", open ? "true" : "false");
    if (open) {
      var input = form.querySelector("input[name=rule]");
      if (input) {
        input.focus();
        input.setSelectionRange(input.value.length, input.value.length);
      }
    }
  });

  // "Edit" (the arguments editor and its live preview) is editor.js's.
})();

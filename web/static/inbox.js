// The inbox (SPEC §15) in the browser: the tab title's pending count, browser notifications for
// a new approval while the page is hidden, the inbox's keys (j/k/a/d) and its waiting times. No
// rendering happens here: the badge, the cards and their outcomes are the server's fragments;
// this only reads their data attributes, moves focus and changes texts it owns.
(function () {
  "use strict";

  // --- The tab title: "(3) Inbox · Countersign", no "(0)". -------------------------------------
  function syncTitle() {
    var badge = document.getElementById("inbox-badge");
    if (!badge) return;
    var n = Number(badge.getAttribute("data-count")) || 0;
    var base = document.title.replace(/^\(\d+\) /, "");
    var want = (n > 0 ? "(" + n + ") " : "") + base;
    if (document.title !== want) document.title = want;
  }

  // --- Browser notifications. ----------------------------------------------------------------
  var notified = {}; // approval ids this page raised a notification for

  function canNotify() {
    return typeof window.Notification === "function" && window.Notification.permission === "granted";
  }

  // A badge update that brings a new approval (data-new-approval) raises exactly one
  // notification on this page, and only while the page is hidden: a visible page shows the
  // prompt or the count already.
  function maybeNotify(badge) {
    var id = badge.getAttribute("data-new-approval");
    if (!id || notified[id]) return;
    notified[id] = true;
    if (document.visibilityState !== "hidden" || !canNotify()) return;
    var tool = badge.getAttribute("data-new-tool") || "";
    var session = badge.getAttribute("data-new-session") || "";
    var url = badge.getAttribute("data-new-url") || "/inbox";
    var summary = badge.getAttribute("data-new-summary") || "";
    var n;
    try {
      n = new window.Notification("Approval required: " + tool, { body: tool + " · " + session + (summary ? "\n" + summary : ""), tag: id });
    } catch (err) {
      return; // a browser that only notifies from a service worker
    }
    n.onclick = function () {
      window.focus();
      focusPrompt(id, url);
      if (n.close) n.close();
    };
  }

  // focusPrompt brings approval id's prompt into view: its inbox card, or its prompt on this
  // session page; any other page goes to the session page at the call's card.
  function focusPrompt(id, url) {
    var card = document.getElementById("inbox-" + id);
    if (card) {
      setCurrent(card);
      return;
    }
    var prompt = document.querySelector('.approval[data-approval-id="' + CSS.escape(id) + '"]');
    if (prompt) {
      prompt.scrollIntoView({ block: "center" });
      var btn = prompt.querySelector("button[value=approve]");
      if (btn) btn.focus();
      return;
    }
    window.location.href = url;
  }

  // "Notify me" asks for the permission; it says when notifications are on or blocked.
  function syncNotifyButton() {
    document.querySelectorAll("[data-action=notify-me]").forEach(function (b) {
      if (typeof window.Notification !== "function") {
        b.hidden = true;
        return;
      }
      b.hidden = false;
      var p = window.Notification.permission;
      b.classList.toggle("on", p === "granted");
      b.setAttribute("aria-pressed", p === "granted" ? "true" : "false");
      // Its words say where it stands (issue 34): asking is done once granted or blocked.
      b.textContent = p === "granted" ? "Notifications on" : p === "denied" ? "Notifications blocked" : "Notify me";
      b.title = p === "granted" ? "Notifications are on: a new approval notifies you while this tab is hidden."
        : p === "denied" ? "Notifications are blocked in this browser's site settings."
        : "Get a browser notification when an approval waits while this tab is hidden.";
    });
  }
  document.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("[data-action=notify-me]");
    if (!b || typeof window.Notification !== "function") return;
    var asked = window.Notification.requestPermission(syncNotifyButton);
    if (asked && asked.then) asked.then(syncNotifyButton);
  });

  // --- The inbox's keys. ---------------------------------------------------------------------
  function inbox() { return document.querySelector("[data-inbox]"); }
  // The cards the keys move over: the pending ones (a decided card shows only its outcome).
  function cards() { return Array.prototype.slice.call(document.querySelectorAll("#inbox-list > .inbox-card:not(.inbox-resolved)")); }
  // The current card is kept by approval id, and marked with an attribute, not a class: a live
  // update replaces cards (htmx settles their classes after the swap), and the mark follows the id.
  var currentId = null;
  function current() {
    var el = currentId && document.getElementById("inbox-" + currentId);
    return el && el.parentElement && el.parentElement.id === "inbox-list" && !el.classList.contains("inbox-resolved") ? el : null;
  }
  function mark() {
    var cur = current();
    document.querySelectorAll("#inbox-list > .inbox-card").forEach(function (c) {
      if (c === cur) c.setAttribute("data-current", "");
      else c.removeAttribute("data-current");
    });
  }

  function setCurrent(card) {
    currentId = card ? card.getAttribute("data-approval-id") : null;
    mark();
    if (card) {
      card.focus({ preventScroll: true });
      card.scrollIntoView({ block: "nearest" });
    }
  }

  function typing(el) {
    if (!el || !el.closest) return false;
    return !!el.closest("input, textarea, select, [contenteditable=''], [contenteditable=true]");
  }

  document.addEventListener("keydown", function (e) {
    if (!inbox()) return;
    // "d", then Enter in the reason denies (an Enter in a form would otherwise approve: the
    // first submit button).
    if (e.key === "Enter" && e.target.matches && e.target.matches("input[name=reason]")) {
      var form = e.target.closest("form[data-deny-armed]");
      if (form) {
        e.preventDefault();
        var deny = form.querySelector("button[value=deny]");
        if (deny) deny.click();
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey || e.isComposing || typing(e.target)) return;
    var list = cards();
    if (!list.length) return;
    var cur = current();
    var i = cur ? list.indexOf(cur) : -1;
    switch (e.key) {
      case "j":
        setCurrent(list[Math.min(i + 1, list.length - 1)]);
        break;
      case "k":
        setCurrent(list[Math.max(i - 1, 0)]);
        break;
      case "a": {
        var card = cur || list[0];
        var approve = card.querySelector(".approval-form button[value=approve]");
        if (!approve) return;
        setCurrent(card);
        approve.click();
        break;
      }
      case "d": {
        var c = cur || list[0];
        var reason = c.querySelector(".approval-form input[name=reason]");
        if (!reason) return;
        setCurrent(c);
        reason.closest("form").setAttribute("data-deny-armed", "");
        reason.focus();
        break;
      }
      default:
        return;
    }
    e.preventDefault();
  });

  // A decision made on this page is not "in another window": its card's outcome, when the live
  // update brings it, loses those words.
  var decidedHere = {};
  document.addEventListener("htmx:beforeRequest", function (e) {
    var card = e.detail.elt && e.detail.elt.closest && e.detail.elt.closest(".inbox-card");
    if (card) decidedHere[card.getAttribute("data-approval-id")] = true;
  });

  // --- Waiting times: "waiting 3 min", ticking from the server's measure. -----------------------
  function waitedText(ms) {
    var s = Math.floor(ms / 1000);
    if (s < 60) return "waiting " + s + " s";
    if (s < 3600) return "waiting " + Math.floor(s / 60) + " min";
    return "waiting " + Math.floor(s / 3600) + " h " + (Math.floor(s / 60) % 60) + " min";
  }
  function tick() {
    var now = performance.now();
    document.querySelectorAll("time[data-waited-ms]").forEach(function (el) {
      if (el._since === undefined) el._since = now - (Number(el.getAttribute("data-waited-ms")) || 0);
      var t = waitedText(now - el._since);
      if (el.textContent !== t) el.textContent = t;
    });
  }

  // After every live update or response: the title, a notification, the outcomes' words, the
  // current card (kept, or the first one).
  function sweep() {
    var badge = document.getElementById("inbox-badge");
    if (badge) maybeNotify(badge);
    syncTitle();
    document.querySelectorAll(".inbox-card [data-elsewhere]").forEach(function (el) {
      var card = el.closest(".inbox-card");
      if (card && decidedHere[card.getAttribute("data-approval-id")]) el.remove();
    });
    if (inbox()) {
      if (!current()) {
        // None yet, or the current one was decided: the next pending card after it, else the
        // last pending one before it.
        var was = currentId && document.getElementById("inbox-" + currentId);
        var pending = cards(), next = null;
        for (var i = 0; was && i < pending.length; i++) {
          if (was.compareDocumentPosition(pending[i]) & Node.DOCUMENT_POSITION_FOLLOWING) { next = pending[i]; break; }
          next = pending[i];
        }
        next = next || pending[0] || null;
        currentId = next ? next.getAttribute("data-approval-id") : null;
      }
      mark();
    }
    tick();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var badge = document.getElementById("inbox-badge");
    // Approvals already counted when the page loaded are not new.
    if (badge && badge.getAttribute("data-new-approval")) notified[badge.getAttribute("data-new-approval")] = true;
    syncNotifyButton();
    sweep();
  });
  document.addEventListener("htmx:wsAfterMessage", sweep);
  document.addEventListener("htmx:afterSettle", sweep);
  setInterval(tick, 1000);
})();

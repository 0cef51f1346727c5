// The session page follows the run (issue 16, item 2). While the reader is at the end of the
// transcript, new content keeps the end in view; once they have scrolled away, nothing moves
// under them and a "New activity ↓" button offers the way back. A new pending approval is always
// made visible: scrolled into view when the reader follows, else announced by a sticky
// "Approval waiting: <tool> ↓" bar that jumps to it, until it has been seen or decided.
//
// Live updates are htmx out-of-band swaps of server-rendered fragments (app.js, live.go); this
// file renders nothing of the transcript, it only watches it change (a MutationObserver) and
// scrolls. Other scripts ask for an element to be brought into view with the "countersign:reveal"
// event (editor.js does when Edit opens), which keeps it clear of the sticky message box.
(function () {
  "use strict";

  // How close (px) to the end of the transcript still counts as "at the end".
  var slack = 48;
  // Gap (px) kept between what is revealed and the edges of the free area.
  var gap = 12;
  // Room (px) kept above the message box for the bar, so it never sits on a revealed prompt.
  var barRoom = 52;

  var following = true;
  // Where our own last scroll left the page, and where the page was at the last scroll event:
  // a scroll event at expectedY is ours; one above lastY is the reader going back up.
  var expectedY = -1;
  var lastY = 0;
  var seen = {}; // approval id -> true once its buttons were in view
  var known = {}; // approval ids present at the last look
  var ui = null; // {bar, activity, approval}
  var scheduled = false;
  var changed = false;

  function transcript() { return document.getElementById("transcript"); }
  function composer() { return document.querySelector(".session .composer"); }

  // The viewport's free area: from the top to the top of the sticky message box, when it shows.
  function freeBottom() {
    var c = composer();
    var h = window.innerHeight;
    if (!c) return h;
    var top = c.getBoundingClientRect().top;
    return top < h && top > 0 ? top : h;
  }

  // The part of the viewport the message box may cover after a scroll: its height while it can
  // stick to the bottom (it does whenever the transcript's end is below the viewport's).
  function coverable() {
    var c = composer();
    return c ? c.offsetHeight : 0;
  }

  function atEnd() {
    var log = transcript();
    if (!log) return true;
    var bottom = log.getBoundingClientRect().bottom;
    return bottom >= 0 && bottom <= freeBottom() + slack;
  }

  // Scrolls the page so the transcript's end (and the message box after it) is at the bottom.
  function scrollToEnd() {
    var main = document.querySelector(".session-main") || transcript();
    if (!main) return;
    var delta = main.getBoundingClientRect().bottom - window.innerHeight;
    if (delta > 0) scrollByOwn(delta);
    following = true;
  }

  // Scrolls el into the free area: whole when it fits, else so that its last part (an
  // approval's buttons, given as `anchor`) shows above the message box.
  function reveal(el, anchor) {
    if (!el || !el.isConnected) return;
    var room = window.innerHeight - coverable() - barRoom;
    var r = el.getBoundingClientRect();
    var delta = 0;
    if (r.height <= room - gap) {
      if (r.top < gap) delta = r.top - gap;
      else if (r.bottom > room) delta = r.bottom - room;
    } else {
      var a = (anchor || el).getBoundingClientRect();
      delta = a.bottom - room;
    }
    if (delta !== 0) scrollByOwn(delta);
  }

  function scrollByOwn(delta) {
    window.scrollBy(0, delta);
    expectedY = window.scrollY;
  }

  // A scroll event: ours changes nothing; the reader going up leaves the end unless they stay
  // near it; the reader going down follows again once they reach the end.
  function onScroll() {
    var y = window.scrollY;
    if (Math.abs(y - expectedY) > 1) following = y < lastY - 1 ? atEnd() : (following || atEnd());
    lastY = y;
    schedule(false);
  }

  // An approval's buttons are in the free area of the viewport: the reader has seen it.
  function inView(approval) {
    var b = (approval.querySelector(".approval-buttons") || approval).getBoundingClientRect();
    return b.height > 0 && b.top >= 0 && b.bottom <= freeBottom() + 1;
  }

  function pendingApprovals() {
    var log = transcript();
    return log ? Array.prototype.slice.call(log.querySelectorAll(".approval[data-approval-id]")) : [];
  }

  function toolOf(approval) {
    var code = approval.querySelector(".approval-title code");
    return code ? code.textContent.trim() : "a tool";
  }

  function ensureUI() {
    if (ui) return ui;
    var bar = document.createElement("div");
    bar.className = "follow-bar";
    var approval = document.createElement("button");
    approval.type = "button";
    approval.className = "follow-approval";
    approval.hidden = true;
    approval.addEventListener("click", function () {
      var first = firstUnseen();
      if (!first) return;
      reveal(first, first.querySelector(".approval-buttons"));
      seen[first.getAttribute("data-approval-id")] = true;
      following = atEnd();
      update();
    });
    var activity = document.createElement("button");
    activity.type = "button";
    activity.className = "follow-activity";
    activity.textContent = "New activity ↓";
    activity.hidden = true;
    activity.addEventListener("click", function () {
      activity.hidden = true;
      scrollToEnd();
      look(false);
    });
    bar.appendChild(approval);
    bar.appendChild(activity);
    document.body.appendChild(bar);
    ui = { bar: bar, activity: activity, approval: approval };
    return ui;
  }

  function firstUnseen() {
    var list = pendingApprovals();
    for (var i = 0; i < list.length; i++) {
      if (!seen[list[i].getAttribute("data-approval-id")]) return list[i];
    }
    return null;
  }

  // Redraws the bar: the first unseen approval, and whether there is activity below.
  function update() {
    var u = ensureUI();
    var first = firstUnseen();
    if (first) {
      var above = first.getBoundingClientRect().bottom < 0;
      u.approval.textContent = "Approval waiting: " + toolOf(first) + (above ? " ↑" : " ↓");
      u.approval.hidden = false;
    } else {
      u.approval.hidden = true;
    }
    if (following) u.activity.hidden = true;
    var log = transcript();
    var endAbove = !!log && log.getBoundingClientRect().bottom < 0;
    u.activity.textContent = endAbove ? "New activity ↑" : "New activity ↓";
    // Just above the message box, centred on the transcript's column.
    u.bar.style.bottom = (window.innerHeight - freeBottom() + 8) + "px";
    var col = (document.querySelector(".session-main") || transcript()).getBoundingClientRect();
    u.bar.style.left = Math.round(col.left + col.width / 2) + "px";
    u.bar.hidden = u.approval.hidden && u.activity.hidden;
  }

  // Looks at the transcript after it changed (contentChanged) or the reader scrolled.
  function look(contentChanged) {
    var list = pendingApprovals();
    var now = {};
    var fresh = null;
    list.forEach(function (a) {
      var id = a.getAttribute("data-approval-id");
      now[id] = true;
      if (!known[id] && !seen[id] && !fresh) fresh = a;
    });
    known = now;
    // Decided approvals leave the page; forget them.
    Object.keys(seen).forEach(function (id) { if (!now[id]) delete seen[id]; });

    if (contentChanged) {
      if (fresh && following) {
        reveal(fresh, fresh.querySelector(".approval-buttons"));
        following = atEnd();
      } else if (following) {
        scrollToEnd();
      } else {
        ensureUI().activity.hidden = false;
      }
    }
    list.forEach(function (a) {
      if (inView(a)) seen[a.getAttribute("data-approval-id")] = true;
    });
    update();
  }

  function schedule(contentChanged) {
    if (contentChanged) changed = true;
    if (scheduled) return;
    scheduled = true;
    window.requestAnimationFrame(function () {
      scheduled = false;
      var c = changed;
      changed = false;
      look(c);
    });
  }

  // Changes inside the transcript (or the transcript replaced whole on a resync) are new content;
  // anything else in the page (panels, the bar itself) is not, nor what changes inside a pending
  // prompt under the reader's hands (Edit, its preview, a refusal's message).
  function inTranscript(node) {
    var el = node.nodeType === 1 ? node : node.parentElement;
    return !!el && (el.id === "transcript" || !!el.closest("#transcript"));
  }
  function inPrompt(node) {
    var el = node.nodeType === 1 ? node : node.parentElement;
    return !!el && !!el.closest(".approval");
  }
  function onMutations(records) {
    for (var i = 0; i < records.length; i++) {
      var r = records[i];
      if (inPrompt(r.target)) continue;
      if (inTranscript(r.target)) return schedule(true);
      for (var j = 0; j < r.addedNodes.length; j++) {
        if (inTranscript(r.addedNodes[j])) return schedule(true);
      }
    }
  }

  // Keyboard focus and the browser's own scrolling keep clear of the sticky message box too.
  function padScroll() {
    document.documentElement.style.scrollPaddingBottom = composer() ? (coverable() + gap) + "px" : "";
  }

  function start() {
    var session = document.querySelector(".session");
    if (!session || !transcript()) return;
    padScroll();
    scrollToEnd();
    new MutationObserver(onMutations).observe(session, { childList: true, subtree: true, characterData: true });
    window.addEventListener("scroll", onScroll, { passive: true });
    window.addEventListener("resize", function () {
      padScroll();
      if (following) scrollToEnd();
      schedule(false);
    });
    // Whoever sends a message wants to see what it starts.
    document.addEventListener("htmx:afterRequest", function (e) {
      var form = e.detail && e.detail.elt;
      if (!form || !form.matches || !form.matches("form[data-reset-on-success]")) return;
      var status = e.detail.xhr ? e.detail.xhr.status : 0;
      if (status >= 200 && status < 300) scrollToEnd();
    });
    document.addEventListener("countersign:reveal", function (e) {
      var el = e.target;
      reveal(el, e.detail && e.detail.anchor);
      following = atEnd();
      schedule(false);
    });
    look(false);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

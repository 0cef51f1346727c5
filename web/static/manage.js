// Sessions and account (issue 16 item 7): the session list's search as you type, the Tools
// panel's filter and collapsed groups (kept when the panel is re-rendered live), and the tab's
// title after a rename. Everything here only shows or hides what the server rendered.
(function () {
  "use strict";

  function norm(s) {
    return (s || "").trim().toLowerCase();
  }

  // --- Session list: filter the rows as you type ------------------------------------------
  // The form is a plain GET (?q=) that searches every session on the server; typing narrows
  // the rows already on the page. When those rows are the answer to another search (the query
  // typed is not a narrowing of it), a miss says that Enter searches every session.
  function filterSessions(input) {
    var form = input.closest("form.session-search");
    var table = document.querySelector("table.session-list");
    var none = document.querySelector(".search-none");
    if (!form || !table) return;
    var q = norm(input.value);
    var server = norm(form.dataset.query);
    var hint = none && none.querySelector(".search-hint");
    if (hint) hint.hidden = !server || q.indexOf(server) >= 0;
    var shown = 0;
    table.querySelectorAll("tr[data-session-title]").forEach(function (tr) {
      var hit = !q || norm(tr.dataset.sessionTitle).indexOf(q) >= 0;
      tr.hidden = !hit;
      if (hit) shown++;
    });
    table.hidden = shown === 0;
    if (none) {
      none.hidden = shown > 0;
      var term = none.querySelector(".search-term");
      if (term) term.textContent = input.value.trim();
    }
  }
  document.addEventListener("input", function (e) {
    if (e.target.matches && e.target.matches("form.session-search input[name=q]")) {
      filterSessions(e.target);
      // The address says the search (issue 34), so a reload or a copied link keeps it: /?q=…
      var u = new URL(window.location.href);
      var q = e.target.value.trim();
      if (q) u.searchParams.set("q", q); else u.searchParams.delete("q");
      window.history.replaceState(null, "", u.pathname + u.search + u.hash);
    }
  });

  // --- Tools panel: filter by name, remember collapsed groups -----------------------------
  // The panel (#tools-panel) is replaced whole after a change and by live updates; what the
  // reader typed in the filter and which groups they closed are kept here and put back.
  var toolFilter = "";
  var filterHadFocus = null; // {start, end} while the filter had focus when a swap came
  var closedKey = "countersign.closedToolGroups";
  function closedGroups() {
    try {
      return JSON.parse(localStorage.getItem(closedKey) || "[]");
    } catch (err) {
      return [];
    }
  }
  function rememberGroup(name, open) {
    var list = closedGroups().filter(function (n) { return n !== name; });
    if (!open) list.push(name);
    try {
      localStorage.setItem(closedKey, JSON.stringify(list));
    } catch (err) { /* private mode: remembered for this page only */ }
  }

  function applyToolFilter(panel) {
    var q = norm(toolFilter);
    var any = false;
    panel.querySelectorAll("details.tool-group").forEach(function (group) {
      var shown = 0, total = 0;
      group.querySelectorAll("li[data-tool-name]").forEach(function (li) {
        total++;
        var hit = !q || norm(li.dataset.toolName).indexOf(q) >= 0;
        li.hidden = !hit;
        if (hit) shown++;
      });
      group.hidden = q !== "" && shown === 0;
      if (shown > 0) any = true;
      var count = group.querySelector(".tool-count");
      if (count) {
        count.textContent = q ? shown + " of " + total + " match" : total === 1 ? "1 tool" : total + " tools";
      }
    });
    var none = panel.querySelector(".tools-filter-none");
    if (none) none.hidden = !q || any;
  }

  function setUpToolsPanel() {
    var panel = document.getElementById("tools-panel");
    if (!panel) return;
    var box = panel.querySelector(".tools-filter");
    var input = panel.querySelector(".tools-filter-input");
    if (box) box.hidden = false;
    if (input && input.value !== toolFilter) input.value = toolFilter;
    var closed = closedGroups();
    panel.querySelectorAll("details.tool-group").forEach(function (group) {
      if (closed.indexOf(group.dataset.toolGroup) >= 0) group.open = false;
    });
    applyToolFilter(panel);
    if (input && filterHadFocus) {
      input.focus();
      try {
        input.setSelectionRange(filterHadFocus.start, filterHadFocus.end);
      } catch (err) { /* not a text field */ }
    }
    filterHadFocus = null;
  }

  function noteFilterFocus() {
    var el = document.activeElement;
    if (el && el.classList && el.classList.contains("tools-filter-input")) {
      filterHadFocus = { start: el.selectionStart, end: el.selectionEnd };
    }
  }

  document.addEventListener("input", function (e) {
    if (!e.target.classList || !e.target.classList.contains("tools-filter-input")) return;
    toolFilter = e.target.value;
    var panel = document.getElementById("tools-panel");
    if (panel) applyToolFilter(panel);
  });
  // The filter is inside the panel's form, which posts on "change": its changes are not the
  // active set's, so they stop here. Enter must not submit the form either.
  document.addEventListener("change", function (e) {
    if (e.target.classList && e.target.classList.contains("tools-filter-input")) e.stopPropagation();
  }, true);
  document.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && e.target.classList && e.target.classList.contains("tools-filter-input")) e.preventDefault();
  });
  // A group opened or closed by the reader is remembered ("toggle" does not bubble).
  document.addEventListener("toggle", function (e) {
    var group = e.target;
    if (!group.matches || !group.matches("#tools-panel details.tool-group") || !group.isConnected) return;
    rememberGroup(group.dataset.toolGroup, group.open);
  }, true);

  // --- Share form: approver rights only for approver links ---------------------------------
  // The server renders the fieldset disabled unless the role is approver (a viewer link with
  // rights is refused); choosing the role turns it on or off without a round trip.
  document.addEventListener("change", function (e) {
    var select = e.target;
    if (!select.matches || !select.matches("form.share-form select[name=role]")) return;
    var rights = select.form.querySelector("fieldset.share-rights");
    if (rights) rights.disabled = select.value !== "approver";
  });

  // --- The tab's title follows a rename ---------------------------------------------------
  function syncTitle() {
    var h = document.getElementById("session-title");
    if (!h) return;
    // The inbox's count leads the title ("(3) …", inbox.js): keep it.
    var count = /^\(\d+\) /.exec(document.title);
    document.title = (count ? count[0] : "") + h.textContent.trim() + " · Countersign";
  }

  function afterSwap() {
    setUpToolsPanel();
    syncTitle();
  }
  document.addEventListener("DOMContentLoaded", function () {
    setUpToolsPanel();
    var q = document.querySelector("form.session-search input[name=q]");
    if (q && q.value) filterSessions(q);
  });
  document.addEventListener("htmx:wsBeforeMessage", noteFilterFocus);
  document.addEventListener("htmx:beforeSwap", noteFilterFocus);
  document.addEventListener("htmx:wsAfterMessage", afterSwap);
  document.addEventListener("htmx:afterSettle", afterSwap);
})();

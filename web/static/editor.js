// Edit is an editor (issue 16, item 8). "Edit" on a pending approval opens its arguments: as
// JSON in the monospace textbox "Arguments" or, for a file write, as a "Path" field and the
// "Content" as plain text (the JSON folded below, kept in step both ways). The form always sends
// the JSON, so an edit passes the same checks on Approve (inputSchema, the tool's own check).
// While the decider types, the server renders the call as edited — write_file's diff,
// run_command's exact command, with the same components as the prompt — in place of the call
// view (debounced; the latest answer wins). Nothing is rendered here.
(function () {
  "use strict";

  var delayMs = 250;
  var originals = new WeakMap(); // .call-preview -> its HTML as the prompt showed it
  var pending = new WeakMap(); // .edit-args -> {timer, controller, seq}

  // Characters a text box would hide, written as JSON escapes in the JSON (as the server's
  // prettyJSON does), so the JSON shows them and still means the same.
  var hidden = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Variation_Selector}\p{White_Space}]/gu;
  function escapeHidden(json) {
    return json.replace(hidden, function (ch) {
      if (ch === "\n" || ch === " " || ch === "\t") return ch;
      var out = "";
      for (var i = 0; i < ch.length; i++) out += "\\u" + ch.charCodeAt(i).toString(16).padStart(4, "0");
      return out;
    });
  }

  function partsOf(el) {
    var approval = el.closest(".approval");
    var box = approval && approval.querySelector(".edit-args");
    if (!box) return null;
    return {
      approval: approval,
      box: box,
      json: box.querySelector("textarea[name=arguments]"),
      path: box.querySelector(".edit-path"),
      content: box.querySelector(".edit-content"),
      preview: approval.querySelector(".call-preview"),
      buttons: approval.querySelector(".approval-buttons"),
    };
  }

  function parseObject(text) {
    try {
      var v = JSON.parse(text);
      return v && typeof v === "object" && !Array.isArray(v) ? v : null;
    } catch (e) {
      return null;
    }
  }

  // Path and Content -> the JSON (other properties kept as they are).
  function fieldsToJSON(p) {
    var obj = parseObject(p.json.value) || parseObject(p.json.dataset.original || "") || {};
    obj.path = p.path.value;
    obj.content = p.content.value;
    p.json.value = escapeHidden(JSON.stringify(obj, null, 2));
  }

  // The JSON -> Path and Content (issue 34: they always show what the JSON says). A property
  // that is missing or not a string shows as empty; while the JSON does not parse, the fields
  // are read-only and a note says they follow the JSON again once it does, so they never show
  // values the form will not send.
  function jsonToFields(p) {
    var obj = parseObject(p.json.value);
    var note = p.box.querySelector(".edit-out-of-step");
    p.path.readOnly = p.content.readOnly = !obj;
    if (!obj) {
      if (!note) {
        note = document.createElement("p");
        note.className = "note edit-out-of-step";
        note.setAttribute("role", "status");
        note.textContent = "The JSON below does not parse: Path and Content follow it again once it does.";
        p.box.insertBefore(note, p.box.firstChild);
      }
      return;
    }
    if (note) note.remove();
    var path = typeof obj.path === "string" ? obj.path : "";
    var content = typeof obj.content === "string" ? obj.content : "";
    if (p.path.value !== path) p.path.value = path;
    if (p.content.value !== content) p.content.value = content;
  }

  // A refusal shown under the form is about the arguments as they were sent: once they change
  // it is stale, and the live preview says what Approve would refuse now, so the error shows once.
  function clearRefusal(p) {
    var errs = p.approval.querySelector(".approval-form .form-errors");
    if (errs && errs.firstChild) errs.replaceChildren();
  }

  // And the other way round: a refusal just shown replaces the preview's note of the same problem.
  document.addEventListener("htmx:afterSwap", function (e) {
    var t = e.detail && e.detail.target;
    if (!t || !t.matches || !t.matches(".approval-form .form-errors") || !t.querySelector("[role=alert]")) return;
    var approval = t.closest(".approval");
    if (approval) approval.querySelectorAll(".call-preview .preview-problem").forEach(function (n) { n.remove(); });
  });

  function fields(p) {
    return [p.json, p.path, p.content].filter(Boolean);
  }

  function open(btn, p) {
    p.box.hidden = false;
    fields(p).forEach(function (f) { f.disabled = false; });
    p.json.value = p.json.dataset.original || "{}";
    if (p.path && p.content) {
      var obj = parseObject(p.json.value) || {};
      p.path.value = typeof obj.path === "string" ? obj.path : "";
      p.content.value = typeof obj.content === "string" ? obj.content : "";
    }
    if (p.preview && !originals.has(p.preview)) originals.set(p.preview, p.preview.innerHTML);
    btn.textContent = "Cancel edit";
    (p.content || p.json).focus({ preventScroll: true });
    // Keep Approve in view, clear of the sticky message box (follow.js).
    p.approval.dispatchEvent(new CustomEvent("countersign:reveal", { bubbles: true, detail: { anchor: p.buttons } }));
  }

  function close(btn, p) {
    p.box.hidden = true;
    fields(p).forEach(function (f) { f.disabled = true; f.readOnly = false; f.value = ""; });
    var note = p.box.querySelector(".edit-out-of-step");
    if (note) note.remove();
    var st = pending.get(p.box);
    if (st) {
      clearTimeout(st.timer);
      if (st.controller) st.controller.abort();
      st.seq++;
    }
    if (p.preview && originals.has(p.preview)) {
      p.preview.innerHTML = originals.get(p.preview);
      originals.delete(p.preview);
    }
    btn.textContent = "Edit";
  }

  // Asks the server for the call as edited, delayMs after the last keystroke; an answer that
  // arrives after a newer request was sent is dropped.
  function schedulePreview(p) {
    var url = p.box.dataset.previewUrl;
    if (!url || !p.preview) return;
    var st = pending.get(p.box) || { timer: 0, controller: null, seq: 0 };
    pending.set(p.box, st);
    clearTimeout(st.timer);
    st.timer = setTimeout(function () {
      if (st.controller) st.controller.abort();
      var seq = ++st.seq;
      var controller = (st.controller = new AbortController());
      fetch(url, {
        method: "POST",
        body: new URLSearchParams({ arguments: p.json.value }),
        credentials: "same-origin",
        signal: controller.signal,
      }).then(function (res) {
        return res.text().then(function (html) { return { ok: res.ok, status: res.status, html: html }; });
      }).then(function (r) {
        if (seq !== st.seq || p.box.hidden || !p.preview.isConnected) return;
        if (r.ok) {
          p.preview.innerHTML = r.html;
          // A refusal of these same arguments is shown already (Approve came first): once is enough.
          if (p.approval.querySelector(".approval-form .form-errors [role=alert]")) {
            p.preview.querySelectorAll(".preview-problem").forEach(function (n) { n.remove(); });
          }
        } else {
          var note = document.createElement("p");
          note.className = "preview-problem";
          note.textContent = "No preview (the server answered " + r.status + ").";
          p.preview.replaceChildren(note);
        }
      }).catch(function () { /* aborted, or offline: app.js says so */ });
    }, delayMs);
  }

  document.addEventListener("click", function (e) {
    var btn = e.target.closest && e.target.closest("[data-action=edit-arguments]");
    if (!btn) return;
    var p = partsOf(btn);
    if (!p) return;
    if (p.box.hidden) open(btn, p);
    else close(btn, p);
  });

  document.addEventListener("input", function (e) {
    var t = e.target;
    if (!t.closest || !t.closest(".edit-args")) return;
    var p = partsOf(t);
    if (!p) return;
    if (p.path && p.content) {
      if (t === p.path || t === p.content) fieldsToJSON(p);
      else if (t === p.json) jsonToFields(p);
    }
    clearRefusal(p);
    schedulePreview(p);
  });
})();

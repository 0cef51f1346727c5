// The Agents page (SPEC §18): a Copy button beside each snippet, and a confirmation before a
// connection is revoked. Both only help: without JavaScript the snippet can be selected and
// copied, and Revoke submits at once.
(function () {
  "use strict";

  // Copy the text of the <pre> a button names (data-copy="<id>"), and say so on the button.
  function copy(button) {
    var pre = document.getElementById(button.dataset.copy);
    if (!pre) return;
    var text = pre.textContent;
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 2000);
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () { select(pre); });
      return;
    }
    select(pre);
  }

  // Select a <pre>'s text, for the reader to copy where the clipboard is not available (a page
  // served over plain HTTP to another host).
  function select(pre) {
    var range = document.createRange();
    range.selectNodeContents(pre);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    pre.focus();
  }

  document.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("button[data-copy]");
    if (b) copy(b);
  });

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) e.preventDefault();
  });
})();

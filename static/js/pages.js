/* Small behaviours of the curator pages, kept out of the markup so that the Content-Security-Policy
 * can forbid inline script: a <select data-autosubmit> submits its form when changed; in a
 * <form data-shortcuts> (the review form), keys 1-5 set its <select data-rating> in turn and a key
 * clicks the <button data-shortcut="key">, unless the person is typing in a field. */
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.hasAttribute && target.hasAttribute("data-autosubmit") && target.form) {
      target.form.submit();
    }
  });
  // After a refused resolve, the first field at fault gets the focus (and scrolls into view).
  document.addEventListener("DOMContentLoaded", function () {
    var invalid = document.querySelector('form[data-shortcuts] [aria-invalid="true"]');
    if (invalid) {
      invalid.focus();
    }
  });
  var nextRating = 0;
  document.addEventListener("keydown", function (event) {
    var form = document.querySelector("form[data-shortcuts]");
    var target = event.target;
    if (!form || event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    if (target && /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName)) {
      return;
    }
    var selects = form.querySelectorAll("select[data-rating]");
    if (/^[1-5]$/.test(event.key) && selects.length) {
      var select = selects[nextRating % selects.length];
      select.value = event.key;
      nextRating += 1;
      event.preventDefault();
      return;
    }
    if (!/^[a-z]$/i.test(event.key)) {
      return;
    }
    var button = form.querySelector('button[data-shortcut="' + event.key.toLowerCase() + '"]');
    if (button) {
      event.preventDefault();
      button.click();
    }
  });
})();

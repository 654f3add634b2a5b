/* Small behaviours of the curator pages, kept out of the markup so that the Content-Security-Policy
 * can forbid inline script: a <select data-autosubmit> submits its form when changed. */
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.hasAttribute && target.hasAttribute("data-autosubmit") && target.form) {
      target.form.submit();
    }
  });
})();

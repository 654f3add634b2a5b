/* The import job's page: poll the job's status (GET /api/v1/imports/<id>/) and move the progress
 * bar; once the job has finished, reload so the server renders the result or the refusal. */
(function () {
  "use strict";
  var panel = document.querySelector("[data-import-job]");
  if (!panel || panel.getAttribute("data-finished") === "true") { return; }
  var url = panel.getAttribute("data-status-url");
  var finished = ["succeeded", "failed", "cancelled"];
  function set(field, value) {
    var node = panel.querySelector('[data-field="' + field + '"]');
    if (node) { node.textContent = value; }
  }
  function poll() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (job) {
        if (!job) { window.setTimeout(poll, 3000); return; }
        var percent = Math.round(job.progress * 100);
        panel.querySelector("progress").value = percent;
        set("percent", String(percent));
        set("message", job.progress_message);
        set("status", job.status.charAt(0).toUpperCase() + job.status.slice(1));
        if (finished.indexOf(job.status) >= 0) { window.location.reload(); return; }
        window.setTimeout(poll, 1000);
      })
      .catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 500);
})();

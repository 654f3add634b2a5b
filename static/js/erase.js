/* Lepus erase page: the worker confirms, and the worker token of this tab (kept by worker.js in
 * sessionStorage under "lepus-worker:<slug>:...") erases them through POST /api/v1/worker/erase.
 * The token never appears in a URL. */
(function () {
  "use strict";

  var config = JSON.parse(document.getElementById("erase-config").textContent);
  var prefix = "lepus-worker:" + config.slug + ":";
  var $ = function (id) { return document.getElementById(id); };

  function storedKeys() {
    var keys = [];
    try {
      for (var i = 0; i < window.sessionStorage.length; i += 1) {
        var key = window.sessionStorage.key(i);
        if (key && key.indexOf(prefix) === 0) { keys.push(key); }
      }
    } catch (e) { /* storage blocked: no token */ }
    return keys;
  }

  function forget(keys) {
    keys.forEach(function (key) {
      try { window.sessionStorage.removeItem(key); } catch (e) { /* private mode */ }
    });
  }

  function show(id) {
    ["erase-confirm", "erase-done", "erase-missing"].forEach(function (other) {
      $(other).hidden = other !== id;
    });
  }

  var keys = storedKeys();
  var token = null;
  if (keys.length) {
    try { token = window.sessionStorage.getItem(keys[keys.length - 1]); } catch (e) { token = null; }
  }
  if (!token) { show("erase-missing"); return; }
  show("erase-confirm");
  if (window.history.length > 1) {
    $("erase-cancel").hidden = false;
    $("erase-cancel").addEventListener("click", function (event) {
      event.preventDefault();
      window.history.back();
    });
  }

  var button = $("erase-confirm-button");
  button.addEventListener("click", function () {
    button.disabled = true;
    $("erase-error").textContent = "";
    fetch(config.urls.erase, {
      method: "POST", credentials: "omit", cache: "no-store",
      headers: {
        "Accept": "application/json", "Content-Type": "application/json",
        "Authorization": "Worker " + token
      },
      body: JSON.stringify({ confirm: true })
    }).then(function (response) {
      return response.json().then(function (body) { return { status: response.status, body: body }; },
        function () { return { status: response.status, body: null }; });
    }).then(function (answer) {
      if (answer.status === 200) {
        forget(keys);
        var body = answer.body;
        var kept = body.judgments_pseudonymised;
        $("erase-summary").textContent = body.judgments_deleted + " of your ratings were deleted" +
          (kept ? " and " + kept + " kept under a random pseudonym" : "") +
          "; " + body.reasons_erased + " text" + (body.reasons_erased === 1 ? "" : "s") +
          " you typed were deleted, and this study no longer holds your participant id.";
        show("erase-done");
        $("erase-done").focus();
        return;
      }
      if (answer.status === 401) { forget(keys); show("erase-missing"); return; }
      button.disabled = false;
      $("erase-error").textContent = (answer.body && answer.body.detail) ||
        "Your data could not be erased just now. Please try again in a moment.";
    }, function () {
      button.disabled = false;
      $("erase-error").textContent = "We could not reach the server. Please check your connection and try again.";
    });
  });
})();

/* Lepus rating page: drives the worker API (join, next, submit, me) with the worker token.
 * Plain JavaScript, no dependency. Every caption, reference and message is inserted as text
 * (textContent), never as HTML: captions may contain markup. */
(function () {
  "use strict";

  var config = JSON.parse(document.getElementById("worker-config").textContent);
  var storageKey = "lepus-worker:" + config.slug + ":" + config.identity;
  var $ = function (id) { return document.getElementById(id); };
  var el = {
    status: $("status"), consent: $("consent"), start: $("start"), task: $("task"),
    video: $("clip"), still: $("still"), play: $("play"), hint: $("watch-hint"), progress: $("progress"),
    progressLabel: $("progress-label"), refsBox: $("references-box"), refs: $("references"),
    form: $("ratings"), candidates: $("candidates"), formError: $("form-error"),
    submit: $("submit"), done: $("done"), doneMessage: $("done-message"),
    completion: $("completion"), code: $("completion-code"), redirect: $("redirect"),
    redirectLink: $("redirect-link"), mturkForm: $("mturk-form"), player: $("player"),
    screenedOut: $("screened-out")
  };

  var token = null;
  try { token = window.sessionStorage.getItem(storageKey); } catch (e) { token = null; }

  // This browser's random secret, sent with every join: only the browser that joined first gets
  // the participation's token (docs/crowd-flow.md, "Who a worker is"). It lives in localStorage,
  // so a reload or coming back later in this browser continues; storage blocked: this tab only.
  var browserKeyName = "lepus-browser-key";
  var browserKeyKept = null;
  function browserKey() {
    var key = browserKeyKept;
    if (key) { return key; }
    try { key = window.localStorage.getItem(browserKeyName); } catch (e) { key = null; }
    if (!key) { try { key = window.sessionStorage.getItem(browserKeyName); } catch (e) { key = null; } }
    if (key) { browserKeyKept = key; return key; }
    var bytes = new Uint8Array(32);
    window.crypto.getRandomValues(bytes);
    key = btoa(String.fromCharCode.apply(null, bytes))
      .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    try { window.localStorage.setItem(browserKeyName, key); } catch (e) {
      try { window.sessionStorage.setItem(browserKeyName, key); } catch (e2) { /* memory only */ }
    }
    browserKeyKept = key;
    return key;
  }

  function joinBody() {
    var body = {};
    Object.keys(config.join).forEach(function (name) { body[name] = config.join[name]; });
    body.browser_key = browserKey();
    return body;
  }

  var current = null;      // the assignment being rated (the `next` body)
  var shownAt = 0;         // when it was shown (ms, performance clock)
  var activeMs = 0;        // time the page was visible while rating it
  var visibleSince = 0;
  var ended = false;
  var unlockTimer = null;
  var progress = { done: 0, total: 0 };
  var busy = false;

  function say(message) { el.status.textContent = message || ""; }

  function api(method, url, body) {
    var headers = { "Accept": "application/json" };
    if (token) { headers["Authorization"] = "Worker " + token; }
    if (body !== undefined) { headers["Content-Type"] = "application/json"; }
    return fetch(url, {
      method: method, headers: headers, credentials: "omit", cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (response) {
      if (response.status === 204) { return { status: 204, body: null }; }
      return response.json().then(
        function (data) { return { status: response.status, body: data }; },
        function () { return { status: response.status, body: null }; }
      );
    });
  }

  // Retry network failures and 5xx answers a few times (submit is idempotent on the server).
  function patiently(call, attempt) {
    attempt = attempt || 0;
    return call().then(function (answer) {
      if (answer.status >= 500 && attempt < 4) { return later(call, attempt); }
      return answer;
    }, function (error) {
      if (attempt < 4) { return later(call, attempt); }
      throw error;
    });
  }

  function later(call, attempt) {
    say("Connection problem — trying again…");
    return new Promise(function (resolve) { setTimeout(resolve, 1500 * (attempt + 1)); })
      .then(function () { return patiently(call, attempt + 1); });
  }

  function fail(message) {
    busy = false;
    say(message);
  }

  // --- screen-out -------------------------------------------------------------------------------
  // A worker excluded by quality control gets a 403 whose body is the campaign's screen-out
  // (state "screened_out") from every worker API call: show it instead of any further clip.
  function isScreenOut(answer) {
    return answer.status === 403 && answer.body && answer.body.state === "screened_out";
  }

  // Quality control runs on the server after each submit and lands within seconds (the pass a
  // submit triggers, or the one every 10 s), so a worker it excludes may already hold the next
  // clip. The page asks when the ratings unlock, every CHECK_MS for the first CHECKS checks of a
  // clip, and when the worker comes back to the tab, so the screen-out comes before the worker
  // rates a clip that was taken back.
  var CHECK_MS = 10000, CHECKS = 3;
  var checkTimer = null, checksLeft = 0;

  function checkStillIn() {
    if (!current) { return; }
    api("GET", config.urls.me).then(function (answer) {
      if (current && isScreenOut(answer)) { screenOut(answer.body); }
    }, function () { /* offline: the submit will tell */ });
  }

  function watchForScreenOut() {
    clearInterval(checkTimer);
    checksLeft = CHECKS;
    checkTimer = setInterval(function () {
      checksLeft -= 1;
      if (checksLeft <= 0) { clearInterval(checkTimer); }
      if (!document.hidden) { checkStillIn(); }
    }, CHECK_MS);
  }

  function screenOut(body) {
    busy = false;
    current = null;
    clearInterval(checkTimer);
    clearTimeout(unlockTimer);
    el.video.pause();
    el.consent.hidden = true;
    el.task.hidden = true;
    el.done.hidden = true;
    say("");
    $("screened-out-message").textContent = body.detail || "";
    $("screened-out-instruction").textContent = body.instruction || "";
    if (body.screen_out_code) {
      $("screened-out-code").textContent = body.screen_out_code;
      $("screened-out-code-line").hidden = false;
    }
    if (body.redirect_url) {
      $("screened-out-link").href = body.redirect_url;
      $("screened-out-redirect").hidden = false;
      if (!body.screen_out_code) {
        setTimeout(function () { window.location.assign(body.redirect_url); }, 2000);
      }
    }
    el.screenedOut.hidden = false;
    el.screenedOut.focus();
  }

  // --- timing ---------------------------------------------------------------------------------
  function now() { return window.performance ? performance.now() : Date.now(); }
  document.addEventListener("visibilitychange", function () {
    if (!current) { return; }
    if (document.hidden) { activeMs += now() - visibleSince; return; }
    visibleSince = now();
    checkStillIn();  // back from another tab: quality control may have decided meanwhile
  });
  function activeSoFar() {
    return Math.round(activeMs + (document.hidden ? 0 : now() - visibleSince));
  }
  function isImage() { return !!current && current.clip.modality === "image"; }
  function videoPlayedMs() {
    var ranges = el.video.played, total = 0;
    for (var i = 0; i < ranges.length; i += 1) { total += ranges.end(i) - ranges.start(i); }
    return Math.round(total * 1000);
  }

  // --- progress -------------------------------------------------------------------------------
  function showProgress() {
    var total = Math.max(progress.total, progress.done + (current ? 1 : 0), 1);
    el.progress.max = total;
    el.progress.value = progress.done;
    el.progressLabel.textContent = current
      ? (isImage() ? "Image " : "Clip ") + (progress.done + 1) + " of about " + total
      : progress.done + " done";
  }

  function readProgress(me) {
    progress.done = me.assignments_done;
    var total = me.assignments_done + me.remaining_estimate + (me.live_assignment_id ? 1 : 0);
    if (me.max_assignments !== null) { total = Math.min(total, me.max_assignments); }
    progress.total = total;
  }

  // --- flow -----------------------------------------------------------------------------------
  function begin() {
    el.consent.hidden = true;
    el.task.hidden = false;
    patiently(function () { return api("GET", config.urls.me); }).then(function (answer) {
      if (answer.status === 401) { return forget(); }
      if (isScreenOut(answer)) { return screenOut(answer.body); }
      if (answer.status === 200) { readProgress(answer.body); }
      loadNext();
    }, function () { fail("We could not reach the server. Please check your connection and reload."); });
  }

  function forget() {
    try { window.sessionStorage.removeItem(storageKey); } catch (e) { /* private mode */ }
    token = null;
    el.task.hidden = true;
    el.consent.hidden = false;
    fail("Your session has ended. Please start again.");
  }

  function join() {
    if (busy) { return; }
    busy = true;
    say("Starting…");
    patiently(function () { return api("POST", config.urls.join, joinBody()); }).then(function (answer) {
      busy = false;
      if (isScreenOut(answer)) { return screenOut(answer.body); }
      if (answer.status === 409 && answer.body && answer.body.state === "in_use_elsewhere") {
        return inUseElsewhere(answer.body.detail);
      }
      if (answer.status !== 200) {
        var detail = answer.body && (answer.body.detail || JSON.stringify(answer.body));
        return fail(detail || "Could not start the study.");
      }
      token = answer.body.worker_token;
      try { window.sessionStorage.setItem(storageKey, token); } catch (e) { /* private mode */ }
      say("");
      begin();
    }, function () { fail("We could not reach the server. Please check your connection."); });
  }

  // Another browser holds this id's participation: no token was given; say so in place of the
  // consent text (docs/crowd-flow.md, "Who a worker is").
  function inUseElsewhere(detail) {
    el.consent.hidden = true;
    say("");
    $("in-use-elsewhere-message").textContent = detail;
    $("in-use-elsewhere").hidden = false;
    $("in-use-elsewhere").focus();
  }

  // `notice`: a message about the previous clip (e.g. its lease was lost) kept on screen.
  function loadNext(notice) {
    busy = true;
    current = null;
    say(notice || "Loading the next clip…");
    patiently(function () { return api("POST", config.urls.next); }).then(function (answer) {
      busy = false;
      if (answer.status === 204) { return finish(); }
      if (answer.status === 401) { return forget(); }
      if (isScreenOut(answer)) { return screenOut(answer.body); }
      if (answer.status !== 200) {
        return fail((answer.body && answer.body.detail) || "Could not load the next clip.");
      }
      say(notice || "");
      render(answer.body);
    }, function () { fail("We could not reach the server. Please check your connection and reload."); });
  }

  function render(assignment) {
    current = assignment;
    ended = false;
    activeMs = 0;
    shownAt = visibleSince = now();
    clearTimeout(unlockTimer);
    el.formError.textContent = "";
    el.hint.hidden = false;
    el.hint.classList.remove("unlocked");
    el.hint.textContent = "Watch the whole clip to unlock the ratings.";
    el.play.textContent = "Play clip";

    el.video.pause();
    el.video.removeAttribute("src");
    el.still.removeAttribute("src");
    // A still image: shown at once, nothing to watch, so no watch gate and no minimum time.
    var image = assignment.clip.modality === "image";
    el.video.hidden = image;
    el.play.hidden = image;
    el.still.hidden = !image;
    if (image) {
      el.still.setAttribute("src", assignment.clip.image_url);
    } else {
      if (assignment.clip.poster_url) { el.video.setAttribute("poster", assignment.clip.poster_url); }
      else { el.video.removeAttribute("poster"); }
      el.video.setAttribute("src", assignment.clip.video_url);
      el.video.load();
    }

    el.refs.textContent = "";
    if (assignment.references && assignment.references.length) {
      assignment.references.forEach(function (text) {
        var item = document.createElement("li");
        item.textContent = text;
        el.refs.appendChild(item);
      });
      el.refsBox.hidden = false;
    } else {
      el.refsBox.hidden = true;
    }

    el.candidates.textContent = "";
    assignment.candidates.forEach(function (candidate, index) {
      el.candidates.appendChild(candidateBlock(candidate, index, assignment.questions));
    });
    setLocked(!image);
    if (image) {
      el.hint.classList.add("unlocked");
      el.hint.textContent = "Look at the image, then rate every caption below and press Submit.";
    }
    showProgress();
    keepPlayerClear();
    watchForScreenOut();
    if (!image) { el.play.focus({ preventScroll: true }); }
  }

  // Where the player sticks to the top (one column), a focused field scrolled into view must
  // land below it, not behind it.
  var oneColumn = window.matchMedia("(max-width: 959px)");
  function keepPlayerClear() {
    var top = oneColumn.matches && !el.task.hidden ? el.player.offsetHeight + 8 : 0;
    document.documentElement.style.scrollPaddingTop = top ? top + "px" : "";
  }
  window.addEventListener("resize", keepPlayerClear);
  el.video.addEventListener("loadedmetadata", keepPlayerClear);
  el.still.addEventListener("load", keepPlayerClear);
  el.still.addEventListener("error", function () {
    if (current) { say("The image could not be loaded. Please reload the page."); }
  });

  function candidateBlock(candidate, index, questions) {
    var number = index + 1;
    var block = document.createElement("section");
    block.className = "candidate card";
    block.setAttribute("role", "group");
    block.setAttribute("aria-labelledby", "cand-" + number + "-title");
    block.dataset.candidateId = String(candidate.id);

    var title = document.createElement("h2");
    title.id = "cand-" + number + "-title";
    title.textContent = "Caption " + number;
    block.appendChild(title);
    var text = document.createElement("p");
    text.className = "caption";
    text.textContent = candidate.text;
    block.appendChild(text);

    questions.forEach(function (question) {
      var fieldset = document.createElement("fieldset");
      fieldset.className = "scale";
      fieldset.dataset.question = question.key;
      fieldset.dataset.label = question.label;
      var legend = document.createElement("legend");
      legend.textContent = question.label;
      fieldset.appendChild(legend);
      var row = document.createElement("div");
      row.className = "levels";
      question.levels.forEach(function (level) {
        var label = document.createElement("label");
        label.className = "level";
        label.title = level.description;
        var input = document.createElement("input");
        input.type = "radio";
        input.name = "c" + candidate.id + "-" + question.key;
        input.value = String(level.value);
        input.setAttribute("aria-label", question.label + ": " + level.value + " — " + level.label);
        var value = document.createElement("span");
        value.className = "value";
        value.textContent = String(level.value);
        var name = document.createElement("span");
        name.className = "name";
        name.textContent = level.label;
        label.appendChild(input);
        label.appendChild(value);
        label.appendChild(name);
        row.appendChild(label);
      });
      fieldset.appendChild(row);
      fieldset.appendChild(fieldError("err-c" + candidate.id + "-" + question.key, fieldset));
      block.appendChild(fieldset);
    });

    if (config.reasonAtOrBelow !== null) {
      var reason = document.createElement("div");
      reason.className = "reason";
      reason.hidden = true;
      var reasonId = "reason-" + number;
      var reasonLabel = document.createElement("label");
      reasonLabel.setAttribute("for", reasonId);
      reasonLabel.textContent = "Caption " + number + ": why the low rating? (required)";
      var area = document.createElement("textarea");
      area.id = reasonId;
      area.maxLength = 2000;
      area.rows = 2;
      reason.appendChild(reasonLabel);
      reason.appendChild(area);
      reason.appendChild(fieldError("err-" + reasonId, area));
      block.appendChild(reason);
    }
    return block;
  }

  // The message of a missing answer sits next to its field (and is read with it).
  function fieldError(id, field) {
    var message = document.createElement("p");
    message.className = "field-error error";
    message.id = id;
    message.hidden = true;
    field.setAttribute("aria-describedby", id);
    return message;
  }

  function markMissing(field, message) {
    var error = $(field.getAttribute("aria-describedby"));
    error.textContent = message;
    error.hidden = false;
    field.classList.add("missing");
    if (field.tagName === "TEXTAREA") { field.setAttribute("aria-invalid", "true"); }
  }

  function clearMissing(field) {
    if (!field.classList.contains("missing")) { return; }
    var error = $(field.getAttribute("aria-describedby"));
    error.textContent = "";
    error.hidden = true;
    field.classList.remove("missing");
    field.removeAttribute("aria-invalid");
    var left = el.candidates.querySelectorAll(".missing").length;
    el.formError.textContent = left
      ? left + (left === 1 ? " answer is" : " answers are") + " still missing (marked in red)."
      : "";
  }

  function setLocked(locked) {
    var sets = el.candidates.querySelectorAll("fieldset");
    for (var i = 0; i < sets.length; i += 1) { sets[i].disabled = locked; }
    el.submit.disabled = locked;
  }

  function maybeUnlock() {
    if (!current || !ended) { return; }
    var wait = config.minSecondsOnClip * 1000 - (now() - shownAt);
    if (wait > 0) {
      el.hint.textContent = "The ratings unlock in a few seconds.";
      clearTimeout(unlockTimer);
      unlockTimer = setTimeout(maybeUnlock, wait + 50);
      return;
    }
    setLocked(false);
    el.hint.classList.add("unlocked");
    el.hint.textContent = "Ratings unlocked: rate every caption below, then press Submit.";
    checkStillIn();
  }

  el.video.addEventListener("ended", function () {
    ended = true;
    el.play.textContent = "Play again";
    maybeUnlock();
  });
  el.video.addEventListener("error", function () {
    if (current) { say("The clip could not be loaded. Please reload the page."); }
  });
  el.play.addEventListener("click", function () {
    if (el.video.ended) { el.video.currentTime = 0; }
    var playing = el.video.play();
    if (playing && playing.catch) {
      playing.catch(function () { say("Press play on the video to start the clip."); });
    }
  });

  // Number keys rate the focused row: the question whose scale holds the focus (arrow keys work
  // natively on radios). Digits typed into a reason box stay text.
  el.candidates.addEventListener("keydown", function (event) {
    var target = event.target;
    if (!target || target.tagName === "TEXTAREA" || event.altKey || event.ctrlKey ||
        event.metaKey || !/^[0-9]$/.test(event.key)) {
      return;
    }
    var fieldset = target.closest && target.closest("fieldset.scale");
    if (!fieldset || fieldset.disabled) { return; }
    var choice = fieldset.querySelector('input[value="' + event.key + '"]');
    if (choice) {
      event.preventDefault();
      choice.checked = true;
      choice.focus();
      choice.dispatchEvent(new Event("change", { bubbles: true }));
    }
  });

  // A missing-answer message goes as soon as its field is filled.
  el.candidates.addEventListener("change", function (event) {
    if (event.target.type === "radio") { clearMissing(event.target.closest("fieldset")); }
  });
  el.candidates.addEventListener("input", function (event) {
    if (event.target.tagName === "TEXTAREA" && event.target.value.trim()) {
      clearMissing(event.target);
    }
  });

  // A reason box appears for a candidate as soon as one of its ratings is at or below the limit.
  el.candidates.addEventListener("change", function (event) {
    if (config.reasonAtOrBelow === null || event.target.type !== "radio") { return; }
    var block = event.target.closest(".candidate");
    var low = false;
    var checked = block.querySelectorAll("input[type=radio]:checked");
    for (var i = 0; i < checked.length; i += 1) {
      if (Number(checked[i].value) <= config.reasonAtOrBelow) { low = true; }
    }
    block.querySelector(".reason").hidden = !low;
    if (!low) { clearMissing(block.querySelector(".reason textarea")); }
  });

  function collect() {
    var ratings = [], missing = [], firstMissing = null;
    var blocks = el.candidates.querySelectorAll(".candidate");
    for (var b = 0; b < blocks.length; b += 1) {
      var block = blocks[b];
      var rating = { candidate_id: Number(block.dataset.candidateId) };
      var low = false;
      var sets = block.querySelectorAll("fieldset");
      for (var s = 0; s < sets.length; s += 1) {
        var checked = sets[s].querySelector("input:checked");
        if (!checked) {
          missing.push(sets[s]);
          markMissing(sets[s], "Choose a rating for " + sets[s].dataset.label + ".");
          firstMissing = firstMissing || sets[s].querySelector("input");
          continue;
        }
        rating[sets[s].dataset.question] = Number(checked.value);
        if (config.reasonAtOrBelow !== null && Number(checked.value) <= config.reasonAtOrBelow) {
          low = true;
        }
      }
      var area = block.querySelector("textarea");
      if (area) {
        var reason = area.value.trim();
        if (reason) { rating.reason = reason; }
        if (low && !reason) {
          missing.push(area);
          markMissing(area, "Say briefly why the rating is low.");
          firstMissing = firstMissing || area;
        }
      }
      ratings.push(rating);
    }
    return { ratings: ratings, missing: missing, firstMissing: firstMissing };
  }

  el.form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (!current || busy || el.submit.disabled) { return; }
    var collected = collect();
    if (collected.missing.length) {
      var count = collected.missing.length;
      el.formError.textContent = count + (count === 1 ? " answer is" : " answers are") +
        " missing (marked in red). Please complete " + (count === 1 ? "it." : "them.");
      if (collected.firstMissing) { collected.firstMissing.focus(); }
      return;
    }
    el.formError.textContent = "";
    busy = true;
    el.submit.disabled = true;
    say("Sending your ratings…");
    var timing = { active_ms: activeSoFar() };
    if (!isImage()) { timing.video_played_ms = videoPlayedMs(); }
    var body = { ratings: collected.ratings, client_timing: timing };
    var url = config.urls.submit.replace("{id}", String(current.assignment_id));
    patiently(function () { return api("POST", url, body); }).then(function (answer) {
      busy = false;
      if (answer.status === 201 || answer.status === 200) {
        progress.done += 1;
        return loadNext();
      }
      if (answer.status === 401) { return forget(); }
      if (isScreenOut(answer)) { return screenOut(answer.body); }
      if (answer.status === 400) {
        el.submit.disabled = false;
        var problems = [];
        Object.keys(answer.body || {}).forEach(function (key) {
          problems.push(key + ": " + [].concat(answer.body[key]).join(" "));
        });
        el.formError.textContent = "Please check: " + problems.join("; ");
        return say("");
      }
      if (answer.status === 409 && answer.body && answer.body.retry_after) {
        // Too early by the server's clock: keep the ratings, allow Submit again after the wait.
        el.formError.textContent = answer.body.detail;
        setTimeout(function () { el.submit.disabled = false; }, answer.body.retry_after * 1000);
        return say("");
      }
      // 409 (lease lost), 404 (gone), 403 (stopped): nothing more to do with this clip.
      return loadNext((answer.body && answer.body.detail) || "This clip could not be submitted.");
    }, function () {
      el.submit.disabled = false;
      fail("We could not reach the server. Your ratings are still here: press Submit again.");
    });
  });

  function finish() {
    current = null;
    clearInterval(checkTimer);
    el.task.hidden = true;
    patiently(function () { return api("GET", config.urls.me); }).then(function (answer) {
      if (isScreenOut(answer)) { return screenOut(answer.body); }
      var me = answer.body || {};
      el.done.hidden = false;
      el.done.focus();
      say("");
      if (me.state === "finished") {
        el.doneMessage.textContent = "You have rated " + me.assignments_done +
          (me.assignments_done === 1 ? " clip" : " clips") + ". Thank you for your help.";
        if (me.completion_code) {
          el.code.textContent = me.completion_code;
          el.completion.hidden = false;
        }
        if (config.mturk.submitTo && config.mturk.assignmentId) {
          el.mturkForm.action = config.mturk.submitTo + "/mturk/externalSubmit";
          $("mturk-assignment").value = config.mturk.assignmentId;
          $("mturk-code").value = me.completion_code || "";
          el.mturkForm.hidden = false;
        } else if (me.redirect_url) {
          el.redirectLink.href = me.redirect_url;
          el.redirect.hidden = false;
          if (!me.completion_code) {
            setTimeout(function () { window.location.assign(me.redirect_url); }, 2000);
          }
        }
      } else if (me.state === "stopped") {
        el.doneMessage.textContent = "There is no more work for you in this study. " +
          "Please contact the researchers if you have questions.";
      } else {
        el.doneMessage.textContent = "There are no clips left for you right now. " +
          "Please return or close the study.";
      }
    }, function () { fail("We could not reach the server. Please reload the page."); });
  }

  if (el.start) { el.start.addEventListener("click", join); }
  if (token && !config.preview) { begin(); }
})();

// The progress page: polls the task summary (with If-None-Match, so an unchanged task costs a
// 304), fetches the failed and errored events when their number changes, and stops polling once
// the task is finished (or cancelled and its last job stopped). The Cancel button POSTs to the
// task's cancel endpoint with the page's CSRF token. Plain JS, no build step; data is only ever
// inserted as text.
(function () {
  "use strict";
  var root = document.getElementById("task-progress");
  var summaryUrl = root.dataset.summaryUrl + "?running=1";  // one poll: counts and running jobs
  var eventsUrl = root.dataset.eventsUrl;
  var cancelUrl = root.dataset.cancelUrl;
  var intervalMs = Number(root.dataset.pollInterval) || 1000;
  var maxProblemPages = 5;
  var etag = null;
  var problemsKey = null;

  function byId(id) { return document.getElementById(id); }

  function setText(id, text) { byId(id).textContent = text; }

  function showError(text) {
    var node = byId("poll-error");
    node.hidden = !text;
    node.textContent = text || "";
  }

  function share(count, total) { return total ? Math.max(0, Math.min(100, count * 100 / total)) : 0; }

  function renderRunning(running) {
    var list = byId("running");
    list.replaceChildren();
    (running || []).forEach(function (job) {
      var item = document.createElement("li");
      item.dataset.jobId = job.job_id;
      var head = document.createElement("span");
      head.className = "job";
      head.textContent = job.job_id + (job.fraction === null ? "" : " · " + Math.round(job.fraction * 100) + "%");
      item.appendChild(head);
      item.appendChild(document.createTextNode(job.message || "started"));
      list.appendChild(item);
    });
    byId("running-section").hidden = !(running && running.length);
  }

  function renderSummary(task) {
    // progress counts settled jobs whole and running ones by the fraction they reported
    // (report_progress); what it holds beyond the settled jobs is the partial part of the bar.
    var doneJobs = task.progress * task.total;
    var settledJobs = Math.min(doneJobs, task.counts.finish + task.counts.failed + task.counts.error);
    var partialJobs = Math.max(0, doneJobs - settledJobs);
    var percent = Math.round(task.progress * 1000) / 10;
    var settled = task.counts.finish + task.counts.failed + task.counts.cancelled + (task.finished_at ? task.counts.error : 0);
    setText("task-name", task.name);
    var badge = byId("task-status");
    badge.textContent = task.status;
    badge.className = "status " + task.status;
    var failedShare = share(task.counts.failed, task.total);
    var errorShare = share(Math.max(0, settledJobs - task.counts.finish - task.counts.failed), task.total);
    var finishShare = task.total ? share(task.counts.finish, task.total) : percent;
    byId("progress-fill").style.width = finishShare + "%";
    byId("progress-failed").style.width = failedShare + "%";
    byId("progress-error").style.width = errorShare + "%";
    byId("progress-partial").style.width = share(partialJobs, task.total) + "%";
    byId("progress-bar").setAttribute("aria-valuenow", String(percent));
    byId("progress-bar").dataset.problems = String(task.counts.failed + task.counts.error);
    renderRunning(task.running);
    setText("progress-text", percent + "% — " + Math.round(settledJobs) + " of " + task.total + " jobs settled" +
      (task.running && task.running.length ? ", " + task.running.length + " running" : ""));
    byId("cancel-task").hidden = !!task.finished_at || task.status === "cancelled";
    ["enqueue", "working", "finish", "failed", "error", "cancelled"].forEach(function (status) {
      setText("count-" + status, String(task.counts[status]));
    });
    root.dataset.state = task.status;
    return settled;
  }

  function renderProblems(events, total) {
    var list = byId("problems");
    list.replaceChildren();
    events.forEach(function (event) {
      var item = document.createElement("li");
      item.className = event.status;
      item.dataset.jobId = event.job_id;
      var head = document.createElement("span");
      head.className = "job";
      head.textContent = event.status + " · " + event.job_id + " · args " + JSON.stringify(event.params.args || []);
      item.appendChild(head);
      var messages = event.messages.filter(function (entry) {
        return entry.status === "failed" || entry.status === "error" || entry.status === "enqueue";
      });
      if (!messages.length) { messages = event.messages.slice(-1); }
      messages.slice(-3).forEach(function (entry) {
        var line = document.createElement("span");
        line.className = "message";
        line.textContent = entry.message;
        item.appendChild(line);
      });
      list.appendChild(item);
    });
    byId("no-problems").hidden = events.length > 0;
    setText("problem-count", total ? "(" + total + (total > events.length ? ", first " + events.length + " shown" : "") + ")" : "");
  }

  function getJson(url) {
    return fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      });
  }

  function loadProblems() {
    var events = [];
    var total = 0;
    function page(url, number) {
      return getJson(url).then(function (data) {
        total = data.count;
        events = events.concat(data.results);
        if (data.next && number < maxProblemPages) { return page(data.next, number + 1); }
        return null;
      });
    }
    return page(eventsUrl + "?status=failed,error&page_size=100", 1).then(function () {
      renderProblems(events, total);
    });
  }

  function schedule(delayMs) { window.setTimeout(poll, delayMs || intervalMs); }

  function poll() {
    var headers = { Accept: "application/json" };
    if (etag) { headers["If-None-Match"] = etag; }
    fetch(summaryUrl, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (response) {
        if (response.status === 304) { showError(""); return schedule(); }
        if (response.status === 429) {
          var retryAfter = Number(response.headers.get("Retry-After")) || 2 * intervalMs / 1000;
          return schedule(retryAfter * 1000);
        }
        if (response.status === 404 || response.status === 403 || response.status === 401) {
          root.dataset.state = "gone";
          return showError("This task cannot be shown (HTTP " + response.status + ").");
        }
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        var newEtag = response.headers.get("ETag");
        return response.json().then(function (task) {
          showError("");
          renderSummary(task);
          var key = task.counts.failed + "/" + task.counts.error + "/" + task.status;
          var next = key !== problemsKey ? loadProblems().then(function () { problemsKey = key; }) : Promise.resolve();
          return next.then(function () {
            etag = newEtag;  // only once everything this version shows is on the page
            if (task.status === "finished" || (task.status === "cancelled" && task.finished_at)) {
              root.dataset.state = task.status;
              root.dataset.polling = "stopped";
              return null;
            }
            return schedule();
          });
        });
      })
      .catch(function (error) {
        showError("Could not update: " + error.message + "; retrying.");
        schedule(2 * intervalMs);
      });
  }

  function cancelTask() {
    if (!window.confirm("Cancel this task? Its waiting jobs are removed and its running ones stopped.")) { return; }
    var token = document.querySelector("input[name=csrfmiddlewaretoken]");
    byId("cancel-task").disabled = true;
    fetch(cancelUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": token ? token.value : "" },
    })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (task) { showError(""); renderSummary(task); })
      .catch(function (error) { showError("Could not cancel: " + error.message + "."); })
      .then(function () { byId("cancel-task").disabled = false; });
  }

  byId("cancel-task").addEventListener("click", cancelTask);
  root.dataset.polling = "running";
  poll();
})();

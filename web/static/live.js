// Live updates for the Taskgate console. Regions marked data-live (with hx-get, hx-select and
// hx-trigger="tg:refresh") are refreshed by htmx when the server-sent event stream at /events
// says something changed, and every 30 s for relative times. When the stream is unavailable the
// page falls back to polling every 10 s. The pause control stops all refreshes; the choice is
// remembered per browser. No inline script: the CSP forbids it.
(function () {
  "use strict";
  var KEY = "taskgate.live.paused";
  var control = document.querySelector("[data-testid=live-control]");
  var button = document.getElementById("live-toggle");
  var status = document.getElementById("live-status");
  if (!control || !button || !status || !window.htmx) {
    return;
  }
  function regions() {
    return document.querySelectorAll("[data-live]");
  }
  if (regions().length === 0) {
    return;
  }
  control.hidden = false;

  var paused = false;
  try { paused = window.localStorage.getItem(KEY) === "1"; } catch (e) { /* storage may be off */ }
  var mode = "connecting";
  var lastUpdate = null;
  var pollTimer = null;
  var pending = null;

  function render() {
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    button.textContent = paused ? "Resume updates" : "Pause updates";
    var text;
    if (paused) {
      text = "Paused";
    } else if (mode === "stream") {
      text = "Live";
    } else if (mode === "polling") {
      text = "Live (polling)";
    } else {
      text = "Connecting…";
    }
    // The time of the last refresh goes in the tooltip, not the text: a growing status would
    // reflow the header (and the page under it) at every refresh.
    status.title = lastUpdate ? "updated " + lastUpdate.toLocaleTimeString() : "";
    status.textContent = text;
    document.body.setAttribute("data-live-state", paused ? "paused" : mode);
  }

  function refresh() {
    if (paused) {
      return;
    }
    regions().forEach(function (el) { window.htmx.trigger(el, "tg:refresh"); });
    lastUpdate = new Date();
    render();
  }

  // Coalesce bursts of changes into one refresh.
  function soon() {
    if (pending) {
      return;
    }
    pending = window.setTimeout(function () { pending = null; refresh(); }, 250);
  }

  function startPolling() {
    mode = "polling";
    if (!pollTimer) {
      pollTimer = window.setInterval(refresh, 10000);
    }
    render();
  }

  function stopPolling() {
    if (pollTimer) {
      window.clearInterval(pollTimer);
      pollTimer = null;
    }
  }

  button.addEventListener("click", function () {
    paused = !paused;
    try { window.localStorage.setItem(KEY, paused ? "1" : "0"); } catch (e) { /* ignore */ }
    if (!paused) {
      refresh();
    }
    render();
  });

  if (window.EventSource) {
    var es = new window.EventSource("/events");
    es.addEventListener("open", function () { stopPolling(); mode = "stream"; render(); });
    es.addEventListener("change", soon);
    es.addEventListener("signedout", function () { es.close(); window.location.reload(); });
    es.addEventListener("error", function () {
      if (es.readyState === window.EventSource.CLOSED) {
        startPolling();
      } else {
        mode = "connecting";
        render();
      }
    });
  } else {
    startPolling();
  }
  window.setInterval(refresh, 30000);
  render();
})();

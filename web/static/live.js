// Live updates for the Taskgate console. Regions marked data-live (with hx-get, hx-select and
// hx-trigger="tg:refresh") are refreshed by htmx when the server-sent event stream at /events
// says something changed, and every 30 s for relative times. When the stream is unavailable the
// page falls back to polling every 10 s. One tab per browser holds the stream for all of them. The pause control stops all refreshes; the choice is
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

  // One stream per browser, shared by every tab: browsers allow six HTTP/1.1 connections per
  // host, so a stream per tab would leave the seventh tab unable to load. The tab holding the
  // "taskgate-live" lock opens the stream and relays what it hears to the other tabs over a
  // BroadcastChannel; when it closes, the lock passes to another tab, which opens the stream.
  function openStream(onEvent, onClosed) {
    var es = new window.EventSource("/events");
    es.addEventListener("open", function () { onEvent("open"); });
    es.addEventListener("change", function () { onEvent("change"); });
    es.addEventListener("signedout", function () { es.close(); onEvent("signedout"); });
    es.addEventListener("error", function () {
      if (es.readyState === window.EventSource.CLOSED) {
        onClosed();
      } else {
        onEvent("connecting");
      }
    });
    return es;
  }

  function apply(what) {
    if (what === "open") {
      stopPolling();
      mode = "stream";
      render();
    } else if (what === "change") {
      if (mode !== "stream") {
        stopPolling();
        mode = "stream";
      }
      soon();
    } else if (what === "signedout") {
      window.location.reload();
    } else if (what === "connecting") {
      mode = "connecting";
      render();
    } else if (what === "down") {
      startPolling();
    }
  }

  if (window.EventSource && window.BroadcastChannel && navigator.locks && navigator.locks.request) {
    var channel = new window.BroadcastChannel("taskgate-live");
    var leading = false;
    var streamUp = false;
    channel.addEventListener("message", function (ev) {
      var what = ev.data;
      if (what === "hello") {
        if (leading && streamUp) {
          channel.postMessage("open");
        }
        return;
      }
      apply(what);
    });
    channel.postMessage("hello");
    navigator.locks.request("taskgate-live", function () {
      leading = true;
      return new Promise(function (release) {
        openStream(function (what) {
          streamUp = what === "open" || what === "change" || (streamUp && what !== "connecting");
          channel.postMessage(what);
          apply(what);
        }, function () {
          streamUp = false;
          channel.postMessage("down");
          apply("down");
          leading = false;
          release();
        });
      });
    });
    document.body.setAttribute("data-live-shared", "true");
  } else if (window.EventSource) {
    openStream(apply, function () { apply("down"); });
  } else {
    startPolling();
  }
  window.setInterval(refresh, 30000);
  render();
})();

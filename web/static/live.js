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

  // Lists keep still. A region marked data-live-rows is not replaced by a refresh: a row that
  // is already shown (matched by its data-key) has its cells changed in place, and new rows are
  // only announced ("3 new — show") in a bar that floats over the page, so nothing under the
  // pointer moves. "Show" puts in the newest list. Rows that left the list or changed group wait
  // for "show" as well.
  var latest = {};
  function keyed(root) {
    var out = {};
    root.querySelectorAll("[data-key]").forEach(function (el) { out[el.getAttribute("data-key")] = el; });
    return out;
  }
  function groupOf(el) {
    var g = el.closest("[data-group]");
    return g ? g.getAttribute("data-group") : "";
  }
  function bar(region) {
    var id = "live-new-" + region.id;
    var b = document.getElementById(id);
    if (!b) {
      b = document.createElement("div");
      b.id = id;
      b.className = "live-new";
      b.setAttribute("role", "status");
      b.setAttribute("data-testid", "live-new");
      var words = document.createElement("span");
      words.setAttribute("data-testid", "live-new-text");
      var show = document.createElement("button");
      show.type = "button";
      show.textContent = "show";
      show.setAttribute("data-testid", "live-new-show");
      show.addEventListener("click", function () { showLatest(region.id); });
      b.appendChild(words);
      b.appendChild(show);
      b.hidden = true;
      document.body.appendChild(b);
    }
    return b;
  }
  function showLatest(id) {
    var fresh = latest[id];
    var cur = document.getElementById(id);
    delete latest[id];
    var b = document.getElementById("live-new-" + id);
    if (b) { b.hidden = true; }
    if (!fresh || !cur) { return; }
    cur.replaceWith(fresh);
    window.htmx.process(fresh);
  }
  function merge(region, fresh) {
    var old = keyed(region);
    var now = keyed(fresh);
    var oldKeys = Object.keys(old);
    if (oldKeys.length === 0) {
      // Nothing shown to keep still: take the new list as it is.
      latest[region.id] = fresh;
      showLatest(region.id);
      return;
    }
    var added = 0;
    var changed = false;
    Object.keys(now).forEach(function (k) {
      var o = old[k];
      var n = now[k];
      if (!o) {
        added++;
        return;
      }
      if (groupOf(o) !== groupOf(n)) {
        changed = true;
      }
      if (o.innerHTML !== n.innerHTML) {
        var focused = o.contains(document.activeElement) ? document.activeElement.getAttribute("data-testid") : null;
        o.innerHTML = n.innerHTML;
        window.htmx.process(o);
        var again = focused && o.querySelector('[data-testid="' + focused + '"]');
        if (again) { again.focus(); }
      }
      if (o.className !== n.className) {
        o.className = n.className;
      }
    });
    oldKeys.forEach(function (k) { if (!now[k]) { changed = true; } });
    fresh.querySelectorAll("[data-live-part]").forEach(function (n) {
      var o = region.querySelector('[data-live-part="' + n.getAttribute("data-live-part") + '"]');
      if (o && o.textContent !== n.textContent) { o.textContent = n.textContent; }
    });
    var b = bar(region);
    if (added === 0 && !changed) {
      delete latest[region.id];
      b.hidden = true;
      return;
    }
    latest[region.id] = fresh;
    var words = b.querySelector("[data-testid=live-new-text]");
    words.textContent = added > 0 ? added + " new —" : "the list changed —";
    b.setAttribute("data-new", String(added));
    b.hidden = false;
  }
  document.body.addEventListener("htmx:beforeSwap", function (ev) {
    var region = ev.detail.target;
    if (!region || !region.hasAttribute || !region.hasAttribute("data-live-rows") || !region.id) {
      return;
    }
    var xhr = ev.detail.xhr;
    if (!xhr || xhr.status !== 200) {
      return;
    }
    var doc = new window.DOMParser().parseFromString(ev.detail.serverResponse, "text/html");
    var fresh = doc.getElementById(region.id);
    if (!fresh) {
      return;
    }
    ev.detail.shouldSwap = false;
    merge(region, document.importNode(fresh, true));
  });
})();

// Keyboard use of the Taskgate console: "/" focuses the search box from any page; on lists, j
// and k move the focus to the next and previous row's link and Enter follows it. Keys typed into
// a field are left alone. No inline script: the CSP forbids it.
(function () {
  "use strict";
  function typing(el) {
    if (!el) {
      return false;
    }
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }
  function rowLinks() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-testid=op-row] [data-testid=op-link], [data-testid=item-link], [data-testid=inbox-op]"));
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(document.activeElement)) {
      return;
    }
    if (ev.key === "/") {
      var box = document.getElementById("site-search");
      if (box) {
        ev.preventDefault();
        box.focus();
      }
      return;
    }
    if (ev.key !== "j" && ev.key !== "k") {
      return;
    }
    var links = rowLinks();
    if (links.length === 0) {
      return;
    }
    var at = links.indexOf(document.activeElement);
    var next = ev.key === "j" ? at + 1 : at - 1;
    if (at < 0) {
      next = ev.key === "j" ? 0 : links.length - 1;
    }
    next = Math.max(0, Math.min(links.length - 1, next));
    ev.preventDefault();
    links[next].focus();
    links[next].scrollIntoView({block: "nearest"});
  });
})();

// Local time beside UTC: a time's tooltip gives the absolute time in UTC (from the server) and,
// when the pointer or the focus reaches it, the same moment in the reader's own time zone.
// Chart bars carry their hour in data-utc and say it in their SVG title.
(function () {
  "use strict";
  function local(iso) {
    var d = new Date(iso);
    if (isNaN(d.getTime())) {
      return "";
    }
    return d.toLocaleString(undefined, {dateStyle: "medium", timeStyle: "short"});
  }
  function addLocal(ev) {
    var el = ev.target && ev.target.closest ? ev.target.closest("time[datetime], [data-utc]") : null;
    if (!el || el.getAttribute("data-local-done") === el.getAttribute("datetime") + el.getAttribute("data-utc")) {
      return;
    }
    var iso = el.getAttribute("datetime") || el.getAttribute("data-utc");
    var words = local(iso);
    if (!words) {
      return;
    }
    var title = el.querySelector ? el.querySelector(":scope > title") : null;
    if (title) {
      title.textContent = title.textContent.split(" · your time ")[0] + " · your time " + words;
    } else {
      el.title = (el.title || "").split(" · your time ")[0] + " · your time " + words;
    }
    el.setAttribute("data-local-done", el.getAttribute("datetime") + el.getAttribute("data-utc"));
  }
  document.addEventListener("mouseover", addLocal);
  document.addEventListener("focusin", addLocal);
})();

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

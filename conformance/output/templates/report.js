// Matrix filters and the detail panel.  Everything is in the page: no network, works from file://.
(function () {
  "use strict";
  var detail = document.getElementById("detail");
  var matrix = document.getElementById("matrix");
  var placeholder = detail.innerHTML;
  var cells = Array.prototype.slice.call(matrix.querySelectorAll("td.cell"));

  function open(cell) {
    var tpl = document.getElementById("detail-" + cell.dataset.index);
    detail.replaceChildren(tpl.content.cloneNode(true));
    detail.dataset.case = cell.dataset.case;
    detail.dataset.backend = cell.dataset.backend;
    detail.dataset.status = cell.dataset.status;
    cells.forEach(function (c) { c.classList.toggle("selected", c === cell); });
    if (window.history && history.replaceState) {
      history.replaceState(null, "", "#" + encodeURIComponent(cell.dataset.case + "@" + cell.dataset.backend));
    }
  }

  function close() {
    detail.innerHTML = placeholder;
    delete detail.dataset.case; delete detail.dataset.backend; delete detail.dataset.status;
    cells.forEach(function (c) { c.classList.remove("selected"); });
  }

  matrix.addEventListener("click", function (ev) {
    var cell = ev.target.closest("td.cell");
    if (cell) open(cell);
  });
  matrix.addEventListener("keydown", function (ev) {
    var cell = ev.target.closest("td.cell");
    if (cell && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); open(cell); }
  });
  detail.addEventListener("click", function (ev) {
    if (ev.target.dataset && ev.target.dataset.action === "close") close();
  });

  var fBackend = document.getElementById("filter-backend");
  var fFamily = document.getElementById("filter-family");
  var fStatus = document.getElementById("filter-status");

  function matches(cell, status) {
    if (!status) return true;
    if (status === "failing") return cell.dataset.failing === "true";
    return cell.dataset.status === status;
  }

  function apply() {
    var b = fBackend.value, f = fFamily.value, s = fStatus.value, shown = 0;
    matrix.querySelectorAll("[data-backend]").forEach(function (el) {
      el.hidden = !!b && el.dataset.backend !== b;
    });
    matrix.querySelectorAll("tbody tr").forEach(function (row) {
      var visible = row.querySelectorAll("td.cell");
      var any = false;
      visible.forEach(function (cell) {
        var inColumn = !b || cell.dataset.backend === b;
        var ok = matches(cell, s);
        cell.classList.toggle("dim", !ok);
        if (inColumn && ok) any = true;
      });
      var rowShown = (!f || row.dataset.family === f) && (any || (!s && !visible.length));
      row.hidden = !rowShown;
      if (rowShown) shown += 1;
    });
    document.getElementById("visible-count").textContent = shown + " of " + matrix.tBodies[0].rows.length + " cases shown";
  }
  [fBackend, fFamily, fStatus].forEach(function (el) { el.addEventListener("change", apply); });
  apply();

  if (location.hash.length > 1) {
    var want = decodeURIComponent(location.hash.slice(1));
    var hit = cells.filter(function (c) { return c.dataset.case + "@" + c.dataset.backend === want; })[0];
    if (hit) { open(hit); hit.scrollIntoView({block: "nearest"}); }
  }
})();

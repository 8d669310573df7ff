// kernelarena report: page switching (the URL's #fragment), the hardware filter, plots drawn with
// the inlined plotly.js the first time they are shown, and tables sorted by a click on a header.
(function () {
  "use strict";
  const figures = JSON.parse(document.getElementById("figures").textContent);
  const template = JSON.parse(document.getElementById("plot-template").textContent);
  const filter = document.getElementById("hardware-filter");
  const pages = Array.from(document.querySelectorAll("section.page"));

  function currentPage() {
    const wanted = decodeURIComponent(window.location.hash.slice(1));
    return pages.find((page) => page.id === wanted) || pages[0];
  }

  function applyFilter() {
    const wanted = filter.value;
    document.querySelectorAll("[data-hardware]").forEach((element) => {
      element.hidden = wanted !== "" && element.dataset.hardware !== wanted;
    });
    document.querySelectorAll("nav#pages a[data-models]").forEach((anchor) => {
      const models = anchor.dataset.models.split("|");
      anchor.classList.toggle("absent", wanted !== "" && !models.includes(wanted));
    });
  }

  function draw(page) {
    page.querySelectorAll(".plot[data-figure]").forEach((element) => {
      if (element.closest("[hidden]")) {
        return;  // drawn when shown: a hidden element has no size to lay a plot out in
      }
      if (element.dataset.drawn) {
        Plotly.Plots.resize(element);
        return;
      }
      const figure = figures[element.dataset.figure];
      const layout = Object.assign({}, figure.layout, { template: template });
      Plotly.newPlot(element, figure.data, layout, { displaylogo: false, responsive: true });
      element.dataset.drawn = "yes";
    });
  }

  function show() {
    const page = currentPage();
    pages.forEach((each) => { each.hidden = each !== page; });
    document.querySelectorAll("nav#pages a").forEach((anchor) => {
      anchor.classList.toggle("current", anchor.getAttribute("href") === "#" + page.id);
    });
    applyFilter();
    draw(page);
  }

  function sortValue(cell) {
    const marked = cell.querySelector("[data-value]");
    if (marked) {
      return parseFloat(marked.dataset.value);
    }
    return cell.textContent.trim().toLowerCase();
  }

  function sortBy(header) {
    const table = header.closest("table");
    const column = Array.from(header.parentNode.children).indexOf(header);
    const down = !header.classList.contains("sorted-down");
    table.querySelectorAll("th").forEach((th) => th.classList.remove("sorted-up", "sorted-down"));
    header.classList.add(down ? "sorted-down" : "sorted-up");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = sortValue(a.cells[column]);
      const y = sortValue(b.cells[column]);
      if (x === y) return 0;
      if (x === "" || Number.isNaN(x)) return 1;  // empty cells last either way
      if (y === "" || Number.isNaN(y)) return -1;
      return (x < y ? -1 : 1) * (down ? -1 : 1);
    });
    rows.forEach((row) => body.appendChild(row));
  }

  document.querySelectorAll("table.sortable th").forEach((header) => {
    header.addEventListener("click", () => sortBy(header));
  });
  filter.addEventListener("change", show);
  window.addEventListener("hashchange", show);
  show();
})();

// Sorting, provenance panels and the row filter of leaderboard.html and report.html,
// inlined into each page by harness.html_assets (the pages stay single offline files).
(function () {
  function key(cell) { return cell ? cell.getAttribute('data-v') || '' : ''; }
  function compare(a, b, asc) {
    var ea = a.trim() === '', eb = b.trim() === '';
    if (ea && eb) return 0;
    if (ea) return 1;               // empty cells last, either direction
    if (eb) return -1;
    var na = Number(a), nb = Number(b);
    if (!isNaN(na) && !isNaN(nb)) return asc ? na - nb : nb - na;
    return asc ? a.localeCompare(b) : b.localeCompare(a);
  }
  // A click on a th.sort header sorts its table by that column (data-col), ascending first.
  // What moves is a tbody.item (a row with its provenance panel) where the table has them,
  // else each row of the table body.
  document.querySelectorAll('table').forEach(function (table) {
    var headers = table.querySelectorAll('th.sort');
    if (!headers.length) return;
    headers.forEach(function (th) {
      th.addEventListener('click', function () {
        var col = +th.getAttribute('data-col');
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        headers.forEach(function (o) { o.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var items = Array.prototype.filter.call(table.tBodies, function (b) { return b.classList.contains('item'); });
        var parent = items.length ? table : table.tBodies[0];
        var units = items.length ? items : Array.prototype.slice.call(parent.rows);
        var first = function (u) { return u.tagName === 'TR' ? u : u.rows[0]; };
        units.sort(function (x, y) { return compare(key(first(x).cells[col]), key(first(y).cells[col]), asc); });
        units.forEach(function (u) { parent.appendChild(u); });
      });
    });
  });
  document.querySelectorAll('button.prov').forEach(function (b) {
    b.addEventListener('click', function () {
      var row = b.closest('tbody').querySelector('tr.prov');
      row.hidden = !row.hidden;
      b.textContent = row.hidden ? '+' : '\u2212';
      b.setAttribute('aria-expanded', String(!row.hidden));
    });
  });
  var input = document.getElementById('filter'), count = document.getElementById('shown');
  if (!input) return;               // a page without a filter box
  function applyFilter() {
    var q = input.value.trim().toLowerCase(), shown = 0, all = 0;
    document.querySelectorAll('tbody.item').forEach(function (g) {
      var hit = !q || g.getAttribute('data-text').indexOf(q) >= 0;
      g.hidden = !hit; all += 1; if (hit) shown += 1;
    });
    count.textContent = q ? shown + ' of ' + all + ' rows shown' : '';
  }
  input.addEventListener('input', applyFilter);
  applyFilter();
})();

/* The viewer page: run header, filtered episode list with paging, episode view, and the
 * task-by-task comparison of two runs with their episodes side by side. */
"use strict";

(() => {
  const { el, badge, fmtReward, rewardClass, statusClass, plural } = CoaRender;
  const api = CoaApi.detect();
  const PAGE = 50;
  const $ = (selector) => document.querySelector(selector);
  const state = { runs: [], offset: 0, compareOffset: 0, selected: null, listTicket: 0, pairsTicket: 0 };

  function notice(message) {
    const box = $("#notice");
    box.hidden = !message;
    box.replaceChildren(message ? el("span", null, message) : "");
  }

  function formValues(form) {
    const values = {};
    for (const [name, value] of new FormData(form).entries()) if (value !== "") values[name] = value;
    return values;
  }

  function fillSelect(select, options, keepFirst = true) {
    const current = select.value;
    const first = keepFirst ? [...select.options].slice(0, 1) : [];
    select.replaceChildren(...first, ...options.map(([value, label]) => el("option", { value }, label)));
    if ([...select.options].some((o) => o.value === current)) select.value = current;
  }

  function pager(container, offset, total, onPage) {
    const end = Math.min(offset + PAGE, total);
    container.replaceChildren(
      el("button", { type: "button", disabled: offset === 0, onclick: () => onPage(Math.max(0, offset - PAGE)) }, "‹ prev"),
      el("span", { class: "muted" }, total ? ` ${offset + 1}–${end} of ${total} ` : " nothing matches "),
      el("button", { type: "button", disabled: end >= total, onclick: () => onPage(offset + PAGE) }, "next ›"));
  }

  // -- runs -------------------------------------------------------------------------------
  function renderRuns() {
    const chips = state.runs.map((run) => {
      const warnings = [];
      if (run.unreadable) warnings.push(`${plural(run.unreadable, "unreadable line")}`);
      for (const f of run.files) {
        if (f.torn_tail) warnings.push(`${f.path}: last line incomplete (${f.torn_tail.bytes} bytes; still being written, or cut off)`);
      }
      const shown = (v) => (typeof v === "number" && !Number.isInteger(v) ? +v.toFixed(3) : v);
      const detail = Object.entries(run.meta || {}).map(([k, v]) => `${k}=${shown(v)}`).join(" · ");
      return el("div", { class: "run-chip", title: `${run.path}\n${run.files.map((f) => f.path).join("\n")}` },
        el("strong", null, `${run.run}: ${run.label}`), ` ${run.kind} · ${plural(run.episodes, "episode")}`,
        run.files.length > 1 ? ` in ${plural(run.files.length, "file")}` : "",
        detail ? el("div", { class: "muted small" }, detail) : null,
        warnings.map((w) => el("div", { class: "warn small" }, w)),
        run.health ? renderHealth(run.health, shown) : null);
    });
    $("#runs").replaceChildren(...chips);
    const options = state.runs.map((run) => [String(run.run), `${run.run}: ${run.label}`]);
    fillSelect($("#filters [name=run]"), options);
    const [a, b] = [$("#compare-form [name=a]"), $("#compare-form [name=b]")];
    fillSelect(a, options, false);
    fillSelect(b, options, false);
    if (state.runs.length > 1 && a.value === b.value) b.value = String(state.runs[1].run);
    const envs = [...new Set(state.runs.flatMap((run) => run.envs || []))].sort();
    fillSelect($("#compare-form [name=env]"), envs.map((name) => [name, name]));
  }

  // An RL run's rollout health: its alarms (loud) and the last step's health metrics.
  function renderHealth(health, shown) {
    const alarms = (health.alarms || []).map((a) =>
      el("div", { class: "warn small" }, `ALARM ${a.alarm} at step ${a.step}: ${a.message}${a.stop ? " (run stopped)" : ""}`));
    const latest = Object.entries(health.latest || {}).map(([k, v]) => `${k}=${shown(v)}`).join(" · ");
    return el("div", { class: "health" },
      alarms,
      latest ? el("div", { class: "muted small" }, `health at step ${health.step}: ${latest}`) : null);
  }

  // -- episode list -------------------------------------------------------------------------
  async function loadList() {
    const query = { ...formValues($("#filters")), offset: state.offset, limit: PAGE };
    const ticket = ++state.listTicket;  // a slower, older answer must not overwrite a newer one
    let page;
    try {
      page = await api.episodes(query);
    } catch (err) {
      if (ticket === state.listTicket) notice(`Could not list episodes: ${err.message}`);
      return;
    }
    if (ticket !== state.listTicket) return;
    notice("");
    const labelOf = new Map(state.runs.map((run) => [run.run, run.label]));
    fillSelect($("#filters [name=env]"), (page.facets.env || []).map(([name, n]) => [name, `${name} (${n})`]));
    fillSelect($("#filters [name=status]"), (page.facets.status || []).map(([name, n]) => [name, `${name} (${n})`]));
    const rows = page.rows.map((row) => el("tr", {
      "data-key": row.key, class: row.key === state.selected ? "selected" : null, onclick: () => openEpisode(row.key),
    },
      el("td", { title: labelOf.get(row.run) }, String(row.run)),
      el("td", { class: "task", title: `${row.env_id} · line ${row.line}` }, row.task_id),
      el("td", null, String(row.sample_index)),
      el("td", null, badge(fmtReward(row.reward), rewardClass(row.reward))),
      el("td", { title: row.status }, badge(row.status, statusClass(row.status))),
      el("td", null, String(row.turns)),
      el("td", null, row.has_ids ? String(row.tokens) : "—"),
      el("td", null, String(row.tool_calls)),
      el("td", { class: row.tool_errors ? "warn" : null }, String(row.tool_errors))));
    $("#episodes tbody").replaceChildren(...rows);
    $("#list-summary").textContent = `${plural(page.total, "episode")} match${page.total === 1 ? "es" : ""}`;
    pager($("#pager"), page.offset, page.total, (offset) => { state.offset = offset; loadList(); });
  }

  async function openEpisode(key) {
    state.selected = key;
    for (const tr of document.querySelectorAll("#episodes tbody tr")) tr.classList.toggle("selected", tr.dataset.key === key);
    const pane = $("#episode-pane");
    pane.replaceChildren(el("div", { class: "muted" }, "loading…"));
    try {
      const payload = await api.episode(key);
      if (state.selected !== key) return;  // another episode was clicked meanwhile
      pane.replaceChildren(CoaRender.episode(payload, api));
      history.replaceState(null, "", `#e=${key}`);
    } catch (err) {
      if (state.selected === key) pane.replaceChildren(el("p", { class: "warn" }, `Could not open episode ${key}: ${err.message}`));
    }
  }

  // -- comparison ---------------------------------------------------------------------------
  async function loadPairs() {
    if (state.runs.length < 2) {
      $("#compare-summary").textContent = "Give two runs to compare them task by task: coa view RUN_A RUN_B";
      return;
    }
    const query = { ...formValues($("#compare-form")), offset: state.compareOffset, limit: PAGE };
    const ticket = ++state.pairsTicket;
    let page;
    try {
      page = await api.compare(query);
    } catch (err) {
      if (ticket === state.pairsTicket) notice(`Could not compare: ${err.message}`);
      return;
    }
    if (ticket !== state.pairsTicket) return;
    notice("");
    $("#compare-summary").textContent =
      `${plural(page.total, "task")} in both runs; ${page.only_a} only in A, ${page.only_b} only in B. Click a task to see its episodes side by side.`;
    const rows = page.rows.map((pair) => el("tr", { onclick: () => openPair(pair), "data-task": pair.task_id },
      el("td", { class: "task" }, pair.task_id), el("td", null, pair.env_id),
      el("td", null, badge(`${fmtReward(pair.a.reward)} (n=${pair.a.n})`, rewardClass(pair.a.reward))),
      el("td", null, badge(`${fmtReward(pair.b.reward)} (n=${pair.b.n})`, rewardClass(pair.b.reward))),
      el("td", { class: pair.delta > 0 ? "up" : pair.delta < 0 ? "down" : null }, fmtReward(pair.delta))));
    $("#pairs tbody").replaceChildren(...rows);
    pager($("#compare-pager"), page.offset, page.total, (offset) => { state.compareOffset = offset; loadPairs(); });
  }

  async function showSide(pane, label, keys, index) {
    const picker = el("div", { class: "samples" }, el("strong", null, label), " sample ",
      keys.map((key, i) => el("button", { type: "button", class: i === index ? "active" : null,
                                           onclick: () => showSide(pane, label, keys, i) }, String(i))));
    pane.replaceChildren(picker, el("div", { class: "muted" }, "loading…"));
    pane.dataset.want = keys[index];
    try {
      const payload = await api.episode(keys[index]);
      if (pane.dataset.want === keys[index]) pane.replaceChildren(picker, CoaRender.episode(payload, api, { compact: true }));
    } catch (err) {
      if (pane.dataset.want === keys[index]) pane.replaceChildren(picker, el("p", { class: "warn" }, err.message));
    }
  }

  function openPair(pair) {
    const labelOf = (n) => (state.runs.find((run) => run.run === n) || { label: "?" }).label;
    const values = formValues($("#compare-form"));
    $("#side-by-side").hidden = false;
    for (const tr of document.querySelectorAll("#pairs tbody tr")) tr.classList.toggle("selected", tr.dataset.task === pair.task_id);
    showSide($("#pane-a"), `A: ${labelOf(Number(values.a))}`, pair.a.keys, 0);
    showSide($("#pane-b"), `B: ${labelOf(Number(values.b))}`, pair.b.keys, 0);
  }

  // -- wiring -------------------------------------------------------------------------------
  function showTab(name) {
    for (const button of document.querySelectorAll(".tab")) button.classList.toggle("active", button.dataset.tab === name);
    $("#tab-episodes").hidden = name !== "episodes";
    $("#tab-compare").hidden = name !== "compare";
    if (name === "compare") loadPairs();
  }

  function debounce(fn, ms) {
    let timer = null;
    return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
  }

  function exportBanner(info) {
    if (!info) return;
    const capped = info.capped_by ? ` (capped by ${info.capped_by}: ${info.capped_by === "max_bytes" ? `${info.max_bytes} bytes` : info.max_episodes})` : "";
    const filters = Object.entries(info.filters || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    const banner = $("#banner");
    banner.hidden = false;
    banner.textContent = `Static export, ${info.created}: ${info.included} of ${info.matched} matching episodes${capped}` +
      (filters ? `; filters ${filters}` : "") + ". Whole tasks are kept together so runs compare side by side.";
  }

  async function main() {
    const reload = () => { state.offset = 0; loadList(); };
    $("#filters").addEventListener("change", reload);
    const typed = debounce(reload, 250);  // typing in task, reward, length (selects fire change)
    $("#filters").addEventListener("input", (event) => { if (event.target.tagName === "INPUT") typed(); });
    $("#filters").addEventListener("reset", () => setTimeout(reload, 0));
    $("#filters").addEventListener("submit", (event) => event.preventDefault());
    const reloadPairs = () => { state.compareOffset = 0; loadPairs(); };
    $("#compare-form").addEventListener("change", reloadPairs);
    const typedPairs = debounce(reloadPairs, 250);
    $("#compare-form").addEventListener("input", (event) => { if (event.target.tagName === "INPUT") typedPairs(); });
    $("#compare-form").addEventListener("submit", (event) => event.preventDefault());
    for (const button of document.querySelectorAll(".tab")) button.addEventListener("click", () => showTab(button.dataset.tab));
    exportBanner(api.exportInfo);
    try {
      state.runs = (await api.runs()).runs;
    } catch (err) {
      notice(`Could not read the runs: ${err.message}`);
      return;
    }
    renderRuns();
    await loadList();
    const match = /^#e=(\d+\.\d+\.\d+)$/.exec(window.location.hash);
    if (match) await openEpisode(match[1]);
    document.body.dataset.ready = "1";
  }

  main();
})();
